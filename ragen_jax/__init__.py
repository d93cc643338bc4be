"""ragen-jax: JAX-native multi-turn RL for LLM reasoning agents (StarPO + RAGEN-2)."""

__version__ = "0.1.0"
