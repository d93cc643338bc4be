"""The lockstep engine with a tiny random Qwen2.5-VL on Sokoban drawn as pictures: every turn's picture is in the
rows as image tokens (never trained), the rows keep their pictures, and the sampler's log-probs (KV cache kept
across turns) equal a fresh scoring of the rows with the vision tower inside."""

import jax
import numpy as np
import pytest
from flax import nnx

from envs.jax_batch import JaxEnvBatch
from envs.sokoban.env import Sokoban
from ragen_jax.models.vision.tiny import make_tiny_vl_model
from ragen_jax.rollout.config import RolloutConfig
from ragen_jax.rollout.lockstep import LockstepEngine
from ragen_jax.trainer.vision_scoring import vision_rows, vl_policy_logprobs

pytestmark = pytest.mark.slow  # ~1-2 min on 2 shared cores: the tower, the sampler's programs and the scoring


@pytest.mark.parametrize("mode", ["full", "limited_multi_turn"])
def test_lockstep_rollout_with_pictures_logprobs_match_a_fresh_scoring(mode):
    model, tokenizer = make_tiny_vl_model(seed=3)
    graphdef, params = nnx.split(model)
    cfg = RolloutConfig(max_turn=3, max_actions_per_turn=2, max_actions_per_traj=10, response_length=8,
                        max_model_len=1024, temperature=1.0, context_mode=mode, context_window=2)
    engine = LockstepEngine(graphdef, tokenizer, cfg, batch_size=2)
    env = JaxEnvBatch(Sokoban(render_mode="image", dim_room=(6, 6), num_boxes=1, bank_size=4), 2)
    result = engine.run(params, env, [7, 7], [0, 0], jax.random.key(0), tag="VisualSokoban")
    batch = result.batch
    pad = engine.image_prompts.image_pad_id
    assert all(ep.num_turns == 3 for ep in result.episodes)  # a random model never solves it
    is_image = batch.tokens == pad
    assert batch.loss_mask[is_image].sum() == 0 and (batch.turn_ids[is_image] == -1).all()
    for row, images in enumerate(batch.images):
        assert is_image[row].sum() == 36 * images.num_images  # 6 x 6 tiles of 28 px: one token per tile
    assert max(im.num_images for im in batch.images) >= 2  # rows show several turns' pictures
    tokens, mask = batch.tokens, batch.attention_mask
    positions, inputs = vision_rows(tokens, mask, batch.images, model.vl_config)
    score = jax.jit(lambda p, t, m, q, i: vl_policy_logprobs(nnx.merge(graphdef, p), t, m, q, i)[0])
    lp = np.asarray(score(params, tokens, mask, positions, inputs))
    trained = batch.loss_mask > 0
    assert trained.sum() > 0
    np.testing.assert_allclose(lp[trained], batch.raw_logprobs[trained], atol=2e-4)
