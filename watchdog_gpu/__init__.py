"""watchdog-gpu: stop rented GPUs from burning money, and never kill a busy one."""

__version__ = "0.1.0"
