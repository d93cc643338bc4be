"""The lockstep rollout engine: a batch of agents plays episodes turn by turn, all rows together.

Each turn: build every active episode's context (chat template around the exact sampled tokens of
earlier turns), feed only the tokens the KV cache does not hold yet, sample one response per
episode, parse it into actions, step the environments, record rewards and penalties. Finished
episodes stay in the batch, masked (`active`), so shapes never change. It is the reference the continuous
engine is tested against, and the engine that plays across hosts.

Across hosts each process plays the rows its devices hold (`LockstepEngine.rows`) with its own envs;
the played episodes are then gathered, so every process builds the same batch.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import jax
import numpy as np

from envs.protocols import EnvBatch
from ragen_jax.rollout.config import RolloutConfig
from ragen_jax.rollout.context import ContextBuilder
from ragen_jax.rollout.episodes import EpisodeBook, finish_rollout
from ragen_jax.rollout.images import ImagePrompts, image_spans, images_from
from ragen_jax.rollout.types import Episode, RolloutResult
from ragen_jax.sampling import Sampler, episode_turn_keys
from ragen_jax.sampling.vision import VLSampler, context_positions, vl_config_of
from ragen_jax.sharding.distributed import agree_any, allgather_objects
from ragen_jax.sharding.placement import global_to_local_rows


class LockstepEngine:
    """Plays batches of episodes with a policy given as split NNX state (`params`).

    With a mesh, this process plays rows `self.rows` of the `batch_size` episodes (all of them with one
    process): its env batch holds `local_batch_size` episodes.

    A vision-language policy (a Qwen25VLModel's graphdef) reads its envs' pictures: contexts carry image tokens
    (`rollout.images`), each row's new tokens their M-RoPE positions and pictures (`sampling.vision.VLSampler`);
    one process, one lane.
    """

    def __init__(self, graphdef, tokenizer, config: RolloutConfig, batch_size: int, mesh=None, lanes: int = 0):
        self.config = config
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.builder = ContextBuilder(tokenizer, enable_think=config.enable_think, action_format=config.action_format)
        self.stop_sequences = config.stop_sequences(tokenizer)
        self.stop_after = config.stop_gates(tokenizer)
        self.vl_config = vl_config_of(graphdef)
        self.image_prompts: ImagePrompts | None = None
        if self.vl_config is not None:
            if mesh is not None and mesh.size > 1:
                raise ValueError("A vision-language policy rolls out on one device for now (VLSampler has no mesh).")
            from ragen_jax.models.vision.processor import image_processor_for

            self.image_prompts = ImagePrompts(tokenizer, image_processor_for(self.vl_config.vision))
            self.sampler = VLSampler(graphdef, cache_size=config.max_model_len, pad_id=tokenizer.pad_token_id,
                                     batch_size=batch_size)
        else:
            self.sampler = Sampler(graphdef, cache_size=config.max_model_len, pad_id=tokenizer.pad_token_id,
                                   batch_size=batch_size, mesh=mesh, lanes=lanes or None)
        self.rows = self.sampler.rows
        self.local_batch_size = self.sampler.local_batch_size

    # ----------------------------------------------------------------------------------------
    def run(self, params: Any, env: EnvBatch, seeds: Sequence[int], group_ids: Sequence[int],
            key: jax.Array, *, tag: str, temperature: float | None = None, greedy: bool = False,
            top_p: float | None = None, top_k: int | None = None, row_multiple: int = 1) -> RolloutResult:
        """Play one episode per seed (episodes of a group share a seed) and build the batch.

        seeds, group_ids [batch_size]: the whole batch; `env` holds this process's `local_batch_size` episodes.
        temperature, top_p, top_k: None = the config's (a validation passes its own).
        """
        cfg = self.config
        B = self.local_batch_size
        play = EpisodeBook.start(self, env, seeds, group_ids, tag, first_episode=self.rows.start)
        sampling = cfg.sampling(self.tokenizer, self.stop_sequences, temperature=temperature, greedy=greedy,
                                top_p=top_p, top_k=top_k, stop_after=self.stop_after)
        cache, cache_lens = self.sampler.init_cache()
        cache_lens = np.array(cache_lens, np.int32)
        active = play.opened.copy()
        turn_times = []
        slot_steps = generated = 0

        for _ in range(cfg.max_turn):
            if not agree_any(active.any()):  # every process makes the same generate calls
                break
            t_turn = time.perf_counter()
            t0 = time.perf_counter()
            new_rows = {}
            for b in np.nonzero(active)[0]:
                cache_lens[b], new_rows[b] = play.next_context(b, int(cache_lens[b]))
            width = max((len(v) for v in new_rows.values()), default=1)
            new_tokens = np.full((B, max(width, 1)), self.tokenizer.pad_token_id, np.int32)
            new_lens = np.zeros(B, np.int32)
            for b, row in new_rows.items():
                new_tokens[b, : len(row)] = row
                new_lens[b] = len(row)
            images = self._image_inputs(play, new_rows, cache_lens) if self.image_prompts is not None else {}
            play.timing["glue"] += time.perf_counter() - t0

            t0 = time.perf_counter()
            keys = episode_turn_keys(key, play.episode_ids(), play.turns())
            out = self.sampler.generate(params, new_tokens, new_lens, keys, sampling,
                                        cache=cache, cache_lens=cache_lens, active=active, **images)
            cache = out.cache
            tokens, lengths, sample_lp, raw_lp, cache_lens = (
                global_to_local_rows(x, self.rows)
                for x in (out.tokens, out.lengths, out.logprobs, out.raw_logprobs, out.cache_lens))
            play.timing["generate"] += time.perf_counter() - t0

            rows = np.nonzero(active)[0]
            slot_steps += int(lengths[rows].max(initial=0)) * B  # every row rides the loop to the slowest one
            generated += int(lengths[rows].sum())
            t0 = time.perf_counter()
            actions = [[] for _ in range(B)]
            for b in rows:
                n = lengths[b]
                actions[b] = play.record_response(b, tokens[b, :n], sample_lp[b, :n], raw_lp[b, :n])
            play.timing["glue"] += time.perf_counter() - t0
            play.step_envs(rows, actions, active)
            turn_times.append(time.perf_counter() - t_turn)

        t0 = time.perf_counter()
        episodes, logprobs = self._gather(play.episodes, play.logprobs)
        result = finish_rollout(self.builder, cfg, self.tokenizer, episodes, logprobs, tag, play.timing, row_multiple,
                                image_prompts=self.image_prompts)
        result.timing["glue"] += time.perf_counter() - t0
        result.extras["turn_times"] = turn_times
        result.extras["decode_steps_per_token"] = slot_steps / max(generated, 1)
        return result

    # ----------------------------------------------------------------------------------------
    def _image_inputs(self, play: EpisodeBook, new_rows: dict, cache_lens: np.ndarray) -> dict:
        """VLSampler.generate's image arguments for this turn's rows: each row's new tokens' M-RoPE positions
        (from its whole context), the pictures of the image tokens the cache does not hold yet, its rope_delta."""
        b = self.local_batch_size
        positions, images, deltas = [None] * b, [None] * b, np.zeros(b, np.int32)
        for row in new_rows:
            ctx, row_images = play.contexts[row], play.context_images[row]
            start = int(cache_lens[row])
            pos, deltas[row] = context_positions(ctx, row_images, self.vl_config)
            positions[row] = pos[:, start:]
            held = len(image_spans(ctx[:start], self.image_prompts.image_pad_id))
            images[row] = images_from(row_images, held)
        return {"positions": positions, "images": images, "rope_deltas": deltas}

    def _gather(self, episodes: list[Episode], logprobs: dict) -> tuple[list[Episode], dict]:
        """Every process's played rows, in batch order (processes sharing rows contribute them once)."""
        parts = allgather_objects((self.rows.start, episodes, logprobs))
        if len(parts) == 1:
            return episodes, logprobs
        all_episodes: list[Episode] = []
        all_logprobs: dict = {}
        for start, eps, lps in sorted(parts, key=lambda part: part[0]):
            if start < len(all_episodes):
                continue
            all_episodes.extend(eps)
            all_logprobs.update({(b + start, turn): v for (b, turn), v in lps.items()})
        if len(all_episodes) != self.batch_size:
            raise RuntimeError(f"Gathered {len(all_episodes)} episodes from {len(parts)} processes, expected "
                               f"{self.batch_size}: the processes' rows do not tile the batch.")
        return all_episodes, all_logprobs
