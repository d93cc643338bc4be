"""Environments: the JAX and host env protocols, the batch interface, and the registry."""

from envs.registry import get_spec, make, register, registered_names

__all__ = ["get_spec", "make", "register", "registered_names"]
