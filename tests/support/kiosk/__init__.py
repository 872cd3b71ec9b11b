"""A device kind written the way a newcomer would add one: a package of its own (``device``: the driver, ``kind``:
its registry entry) and one line naming ``kind`` in ``devices.registry.KIND_MODULES``. Nothing in handeye's packages
knows it: the registry tests prove that every command drives it all the same."""
