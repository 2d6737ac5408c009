"""The agent's three tools (paper 3.1, A.1): ``base`` (their definitions), ``toolbox`` (the tools
as the agent sees them), ``sandbox`` (backends over the sandbox web). The live web's backends
are in ``live``; a run's toolbox is made by ``backends.toolbox``."""
