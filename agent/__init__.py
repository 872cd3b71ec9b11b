"""The agent layer: the closed loop, guard, secrets, configuration and the ``agent`` CLI."""
