"""Provider adapters: one module per provider, registered in ``PROVIDERS``."""
