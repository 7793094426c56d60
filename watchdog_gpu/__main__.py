"""``python -m watchdog_gpu`` runs the command-line interface."""

from watchdog_gpu.cli import main

raise SystemExit(main())
