"""Test infrastructure shared by several test packages (servers, fakes)."""
