"""``nsqadmin``: a placeholder until its issue lands."""

import sys


def main() -> int:
    print("nsqadmin: not implemented yet", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
