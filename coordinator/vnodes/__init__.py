"""Vnode assignment, pure: the owner registry, round identities, placement and partition routing."""
