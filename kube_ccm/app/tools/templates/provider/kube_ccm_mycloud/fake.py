"""A fake cloud, for tests and demos: what `client.py` talks to at an endpoint
`fake:` (in this process) or `fake:/path/state.json` (a file several processes share,
such as a test and the kube-ccm daemon it starts)."""

from __future__ import annotations

import contextlib
import fcntl
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class FakeInstance:
    id: str
    name: str
    zone: str
    type: str = "small"
    state: str = "running"  # running, stopped, terminated
    private_ip: str = "10.0.0.1"


@dataclass
class FakeLoadBalancer:
    name: str
    tag: str
    ports: list[int]
    targets: list[str]
    address: str


@dataclass
class FakeState:
    instances: dict[str, FakeInstance] = field(default_factory=dict)
    load_balancers: dict[str, FakeLoadBalancer] = field(default_factory=dict)
    next_id: int = 1
    outage: bool = False
    """When true every call fails, as in an outage (the conformance kit sets it)."""
    token: str = ""
    """The only API token the cloud accepts; empty: any, or none."""


class FakeCloud:
    """The fake's state, in memory or in a JSON file (locked while a call runs)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._memory = FakeState()

    @contextlib.contextmanager
    def state(self) -> Iterator[FakeState]:
        """The state for one call; changes made inside are kept."""
        if self.path is None:
            yield self._memory
            return
        self.path.touch(exist_ok=True)
        with self.path.open("r+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            text = handle.read()
            state = _load(text) if text.strip() else FakeState()
            yield state
            handle.seek(0)
            handle.truncate()
            handle.write(json.dumps(asdict(state)))

    def add_instance(self, name: str, zone: str = "zone-a", **fields: str) -> FakeInstance:
        with self.state() as state:
            n = state.next_id
            state.next_id += 1
            instance = FakeInstance(f"i-{n:06d}", name, zone, private_ip=f"10.0.0.{n}", **fields)
            state.instances[instance.id] = instance
            return instance

    def set_state(self, name: str, new_state: str) -> None:
        with self.state() as state:
            for instance in state.instances.values():
                if instance.name == name and instance.state != "terminated":
                    instance.state = new_state


def _load(text: str) -> FakeState:
    raw = json.loads(text)
    return FakeState(
        instances={k: FakeInstance(**v) for k, v in raw["instances"].items()},
        load_balancers={k: FakeLoadBalancer(**v) for k, v in raw["load_balancers"].items()},
        next_id=raw["next_id"],
        outage=raw["outage"],
        token=raw.get("token", ""),
    )


SHARED = FakeCloud()
"""The cloud every `endpoint: fake:` client talks to in one process."""
