"""Start sushy-tools' Redfish emulator (qfence test harness), optionally with
a chosen power-change delay for its fake driver.

sushy-tools' fake driver applies a Reset `int(now) + randint(1, 11)` seconds
after the POST, to mimic slow hardware. Tests that only need *some* delay can
make it shorter with REDFISH_POWER_DELAY:

  unset      sushy's own 1..11 s
  "N"        N s (0: applied on the next read)
  "A-B"      uniformly A..B s

Everything else is sushy-tools' own `sushy-emulator` entry point; the
arguments are passed on unchanged. Run with the sushy venv's python.
"""

import os
import random
import sys

from sushy_tools.emulator.resources.systems import fakedriver
from sushy_tools.emulator import main as sushy_main


def parse_delay(text):
    lo, _, hi = text.partition('-')
    lo = int(lo)
    hi = int(hi) if hi else lo
    if lo < 0 or hi < lo:
        raise SystemExit('REDFISH_POWER_DELAY must be N or A-B with 0 <= A <= B, not %r' % text)
    return lo, hi


class _Random:
    """Stands in for the `random` module inside sushy's fake driver."""

    def __init__(self, lo, hi):
        self.lo, self.hi = lo, hi

    def randint(self, a, b):
        return random.randint(self.lo, self.hi)


if __name__ == '__main__':
    delay = os.environ.get('REDFISH_POWER_DELAY', '')
    if delay:
        fakedriver.random = _Random(*parse_delay(delay))
    sys.argv[0] = 'sushy-emulator'
    sys.exit(sushy_main.main())
