"""The StarPO trainer: update steps, optimizers, the training loop."""
