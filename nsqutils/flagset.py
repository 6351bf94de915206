"""Go's ``flag.Parse`` with ``flag.ExitOnError``, as NSQ's utilities use it, over common/goflags.

What follows the flags is left to the program (NSQ's utilities ignore it). ``-h`` / ``-help``
(when not defined) print the usage to stderr and exit 0; any other error prints Go's message,
then the usage, to stderr and exits 2.
"""

import sys
from types import SimpleNamespace

from common.goflags import Flag, FlagError, HelpRequested, parse, resolve, usage

EXIT_HELP, EXIT_BAD_FLAGS = 0, 2


class FlagSet:
    def __init__(self, program: str, flags: list[Flag]):
        self.program = program
        self.flags = flags

    def usage(self) -> str:
        return usage(self.program, self.flags) + "\n"

    def parse(self, argv: list[str] | None = None) -> SimpleNamespace:
        """The flags' values (attribute names use ``_``, defaults for those not given) and ``args``
        (what follows the flags); prints and exits as Go does on ``-h`` or an error."""
        try:
            parsed = parse(self.flags, sys.argv[1:] if argv is None else list(argv))
        except HelpRequested:
            code = EXIT_HELP
        except FlagError as exc:
            sys.stderr.write(f"{exc}\n")
            code = EXIT_BAD_FLAGS
        else:
            return SimpleNamespace(**resolve(self.flags, parsed.given, {}).values, args=parsed.args)
        sys.stderr.write(self.usage())
        sys.stderr.flush()
        raise SystemExit(code)
