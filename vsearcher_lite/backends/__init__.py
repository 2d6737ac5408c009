"""Where a run's settings become the objects it works with: ``toolbox`` (the agent's tools over
the sandbox or the live web, with the run's tool cache), ``chat`` (a role's chat backend from a
spec), ``commands`` (``vsearcher-lite tools``). The one place that chooses between the course's
modules and ``live``, and imports the live web only when a setting asks for it.
"""
