"""An OpenAI-compatible endpoint for trained agents: `python -m ragen_jax.serve --checkpoint RUN`."""
