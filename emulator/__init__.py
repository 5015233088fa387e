"""A fast streaming server that speaks vLLM's wire format with configurable timing.

For fast tests, dry runs and measuring the load generator itself; never a stand-in for
the real engine in end-to-end tests.
"""

from vprof.emulator.config import EmulatorConfig
from vprof.emulator.server import Emulator

__all__ = ["Emulator", "EmulatorConfig"]
