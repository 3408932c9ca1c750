"""What every backend offers the sweeps: a fingerprint and measurements of problem configs."""

from __future__ import annotations

import abc

from ..errors import CalibError
from ..timing import Measurement, StoppingRule


class DeviceOutOfMemory(CalibError, MemoryError):
    """A sweep point needs more device memory than is free. The sweep records the point as failed
    with this message and goes on with the others."""


class UnsupportedConfig(CalibError, ValueError):
    """The backend has no kernel for this problem config."""


class Backend(abc.ABC):
    name: str = "abstract"
    simulated: bool = False

    def __init__(self, rule: StoppingRule | None = None):
        self.rule = rule or StoppingRule()

    @abc.abstractmethod
    def fingerprint(self) -> tuple[dict, dict]:
        """(device, software) as recorded in sessions and profiles."""

    @property
    @abc.abstractmethod
    def l2_bytes(self) -> int: ...

    @property
    @abc.abstractmethod
    def memory_bytes(self) -> int: ...

    @abc.abstractmethod
    def measure(self, configs: list[dict]) -> list[Measurement | Exception]:
        """One Measurement per config, or the exception that stopped that config alone
        (DeviceOutOfMemory, UnsupportedConfig). Anything else propagates."""

    def prepare(self, configs: list[dict]) -> None:
        """Compile what ``configs`` will run. Called before a notebook takes the GPU, so that
        compiling overlaps another notebook's measurements; the default has nothing to compile."""

    def describe(self) -> str:
        device, _ = self.fingerprint()
        return f"{device.get('name')} ({self.name} backend)"

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
