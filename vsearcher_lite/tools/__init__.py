"""The agent's three tools (paper 3.1, A.1): ``base`` (their definitions), ``toolbox`` (the tools
as the agent sees them), ``sandbox`` (backends over the sandbox web), ``live``, ``live_search``,
``live_read`` and ``live_parse`` (the live web; its HTML reading is ``world.live_html``),
``factory`` (a run's toolbox, cached), ``commands`` (``vsearcher-lite tools``)."""
