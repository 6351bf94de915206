"""nsq_to_file's ``--datetime-format``: the strftime directives NSQ's copy of jehiah/go-strftime
knows (%B %b %m %A %a %d %H %I %M %S %Y %y %p %Z %z %%), in local time, English names; any
other text, an unknown directive included, is kept as it is."""

import re
import time

DIRECTIVES = frozenset("BbmAadHIMSYypZz%")
_DIRECTIVE = re.compile(r"%(.)", re.DOTALL)


def strftime(layout: str, moment: time.struct_time | None = None) -> str:
    moment = time.localtime() if moment is None else moment

    def replace(match: re.Match) -> str:
        return time.strftime("%" + match.group(1), moment) if match.group(1) in DIRECTIVES else match.group(0)

    return _DIRECTIVE.sub(replace, layout)
