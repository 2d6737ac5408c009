"""The agent's three tools (paper 3.1, A.1): ``base`` (their definitions), ``toolbox`` (the tools
as the agent sees them), ``sandbox`` (backends over the sandbox web), ``live``, ``live_search``,
``live_read``, ``live_html`` and ``live_parse`` (the live web), ``factory`` (a run's toolbox,
cached), ``commands`` (``vsearcher-lite tools``)."""
