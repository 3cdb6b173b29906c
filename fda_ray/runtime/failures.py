"""How a run fails, as exceptions every layer shares (the executors raise them, the loop and the command
lines catch them): a client that keeps failing, a run stopped early with its finished rounds."""
from __future__ import annotations

from fda_ray.core.history import History


class ClientFailure(RuntimeError):
    """A client failed a round more often than the executor retries it."""

    def __init__(self, client: int, round_idx: int, attempts: int, cause: str) -> None:
        super().__init__(f"client {client} failed round {round_idx} {attempts} times; last error: {cause}")
        self.client, self.round_idx, self.attempts = client, round_idx, attempts


class ClientsStranded(ClientFailure):
    """A run's client actors were lost with their node and no live node (nor a node type an autoscaler can add)
    can hold them again: retrying cannot help until the cluster has such a node. The message starts with
    fda_ray.runtime.resources.STRANDED, which the sweep recognises."""

    def __init__(self, message: str) -> None:
        RuntimeError.__init__(self, message)
        self.client, self.round_idx, self.attempts = -1, -1, 0

    def __reduce__(self) -> tuple:
        return type(self), (str(self),)


class RunFailed(RuntimeError):
    """A run stopped early; `history` holds the rounds that finished (and the weights after the last one)."""

    def __init__(self, message: str, history: History) -> None:
        super().__init__(message)
        self.history = history

    def __reduce__(self) -> tuple:  # picklable (a process pool or Ray sends it back to the sweep)
        return type(self), (str(self), self.history)


class RunInterrupted(RunFailed):
    """The run was interrupted (Ctrl-C); `history` holds the rounds that finished."""
