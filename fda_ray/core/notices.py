"""RunWarning: something a run does that its user may not expect, said as one line. The command lines print it as
`warning: <message>` (fda_ray.experiments.cli.one_line_warnings); here, in the core, so that every layer (the data
loaders, the runtime's preflight) can raise it without importing the experiments."""
from __future__ import annotations


class RunWarning(UserWarning):
    """Something a run does that its user may not expect (the CLIs print it as one line)."""
