"""The simulated provider world: scenarios, billing state machines, faults, HTTP dialect servers
speaking Vast/RunPod/Lambda, and fake ``nvidia-smi`` output (``watchdog-gpu sim serve``,
``watchdog-gpu simulate``, the demo and the tests all use it)."""
