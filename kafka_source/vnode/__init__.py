"""Vnode-scoped ownership: the driver, the pure ownership plans, executing them, and drain rounds."""
