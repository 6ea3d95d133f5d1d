"""Jobs through Ray (executors.py): a local instance for the driver, or a running cluster's head."""

from __future__ import annotations

import socket
import time

from symformer.runner.engine import _Throttled


class RayEngine(_Throttled):
    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        device: str = "cpu",
        n_workers: int = 1,
        gpus_per_job: int = 0,
        cpus_per_job: int = 1,
    ):
        super().__init__(device)
        import ray  # optional (the ray extra): imported when this engine starts, never by `import symformer`

        self.ray, self.started = ray, False
        t0 = time.perf_counter()
        if address is None:  # a local instance for this driver, with a small object store (results are small)
            ray.init(
                num_cpus=n_workers * cpus_per_job,
                object_store_memory=80 * 2**20,
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
            )
            self.started = True
        else:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
        self.startup_seconds = time.perf_counter() - t0
        self.options = {"num_cpus": cpus_per_job, "num_gpus": gpus_per_job, "max_retries": 0}
        self.address = address

    def describe(self) -> str:
        return f"ray ({self.address or 'local instance'})"

    def _submit(self, call, job, work):
        if getattr(self, "_remote", (None, None))[0] is not call:  # one remote function: Ray exports it once
            self._remote = (call, self.ray.remote(**self.options)(call))
        return self._remote[1].remote(job, work, self.name, self.device)

    def _wait(self, handles):
        ready, _ = self.ray.wait(handles, num_returns=1)
        return ready[0]

    def _result(self, handle):
        return self.ray.get(handle)

    def _cancel(self, handles):
        for h in handles:
            try:
                self.ray.cancel(h, force=True)
            except Exception:  # noqa: BLE001  (best effort: the driver is already stopping)
                pass

    def close(self) -> None:
        if self.ray.is_initialized():
            self.ray.shutdown()


def _check_reachable(address: str) -> None:
    """A refusal in seconds instead of ray.init's long retries: the head's host:port must accept a connection."""
    hostport = address.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    ok = bool(host) and port.isdigit()
    if ok:
        try:
            socket.create_connection((host, int(port)), timeout=5).close()
        except OSError:
            ok = False
    if not ok:
        raise ValueError(
            f"--ray-address: got {address!r}, expected the host:port (or ray://host:port) of a "
            "running Ray head that this machine can reach; leave it out to start a local instance"
        )
