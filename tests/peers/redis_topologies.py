"""Redis as operators run it for a fleet, on loopback: a Sentinel set-up and a Cluster.

`SentinelSet`: a primary, a replica and three sentinels (quorum 2), failing over within
about a second and a half of the primary's death. `ClusterSet`: three primaries with
one replica each, made by `redis-cli --cluster create`; a dead primary's replica takes
its slots over within about two seconds. Every process is a `LoggedProcess` owned here
and ended by `stop()`. Nothing persists: a process restarted comes back empty.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import redis

from tests.peers.tooling import LoggedProcess, quiet_port

SERVICE = "mymaster"
READY = "Ready to accept connections"


def _server(port: int, *extra: str, name: str, folder: Path) -> LoggedProcess:
    """A redis-server working in `folder` (a replica writes the primary's data there)."""
    args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    args += ["--dir", str(folder)]
    args += ["--appendonly", "no", "--protected-mode", "no", *extra]
    process = LoggedProcess(args, name=name, stdout_too=True)
    process.start_ready(READY)
    return process


class SentinelSet:
    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="mrtr-sentinel-"))
        self.sentinels: list[LoggedProcess] = []
        self.primary = self.replica = None
        try:
            self._start()
        except BaseException:
            self.stop()  # whatever started is ended, even when a start fails
            raise

    def _start(self) -> None:
        self.primary_port, replica_port = quiet_port(), quiet_port()
        self.primary = _server(self.primary_port, name="redis-primary", folder=self.folder)
        self.replica = _server(
            replica_port,
            "--replicaof",
            "127.0.0.1",
            str(self.primary_port),
            name="redis-replica",
            folder=self.folder,
        )
        self.sentinel_ports = [quiet_port() for _ in range(3)]
        for port in self.sentinel_ports:
            conf = self.folder / f"sentinel-{port}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {self.folder}\n"
                f"sentinel monitor {SERVICE} 127.0.0.1 {self.primary_port} 2\n"
                f"sentinel down-after-milliseconds {SERVICE} 500\n"
                f"sentinel failover-timeout {SERVICE} 3000\n"
                f"sentinel parallel-syncs {SERVICE} 1\n"
            )
            sentinel = LoggedProcess(
                ["redis-server", str(conf), "--sentinel"], name="redis-sentinel", stdout_too=True
            )
            sentinel.start_ready("Sentinel ID")
            self.sentinels.append(sentinel)
        self.replica.wait_for_line(  # a full sync, or a partial one
            lambda line: (
                "sync: Finished with success" in line
                or "Successful partial resynchronization" in line
            )
        )
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)
        self.url = f"redis+sentinel://{hosts}/{SERVICE}/0"

    def kill_primary(self) -> None:
        assert self.primary is not None
        self.primary.kill9()

    def stop(self) -> None:
        for process in [*self.sentinels, self.replica, self.primary]:
            if process is not None:
                process.stop()
        shutil.rmtree(self.folder, ignore_errors=True)


class ClusterSet:
    def __init__(self, primaries: int = 3) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="mrtr-cluster-"))
        self.ports = [quiet_port() for _ in range(2 * primaries)]
        self.nodes: dict[int, LoggedProcess] = {}
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        for port in self.ports:
            self.nodes[port] = _server(
                port,
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                str(self.folder / f"nodes-{port}.conf"),
                "--cluster-node-timeout",
                "1000",
                name=f"redis-node-{port}",
                folder=self.folder,
            )
        subprocess.run(
            [
                "redis-cli",
                "--cluster",
                "create",
                *(f"127.0.0.1:{p}" for p in self.ports),
                "--cluster-replicas",
                "1",
                "--cluster-yes",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        for node in self.nodes.values():
            node.wait_for_line("Cluster state changed: ok")
        self.url = f"redis+cluster://127.0.0.1:{self.ports[0]}"

    def primary_ports(self) -> list[int]:
        client = redis.Redis(port=self.ports[0])
        try:
            nodes = client.cluster("nodes")
        finally:
            client.close()
        return sorted(
            int(address.split(":")[1].split("@")[0])
            for address, node in nodes.items()
            if "master" in node["flags"] and "fail" not in node["flags"]
        )

    def kill_a_primary(self) -> int:
        """Kill one primary (not the one clients bootstrap from); its replica takes over."""
        port = next(p for p in self.primary_ports() if p != self.ports[0])
        self.nodes[port].kill9()
        return port

    def stop(self) -> None:
        for node in self.nodes.values():
            node.stop()
        shutil.rmtree(self.folder, ignore_errors=True)
