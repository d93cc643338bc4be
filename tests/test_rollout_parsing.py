"""Parser: RAGEN's rules, equivalence with the reference regex, and robustness to any text."""

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragen_jax.rollout.parsing import (ANSWER_ONLY_PATTERN, THINK_ANSWER_PATTERN, _match_answer_only,
                                       _match_think_answer, parse_response)
from ragen_jax.rollout.prompts import TurnRecord, build_messages, format_reward, system_prompt

LOOKUP = {"up": 0, "down": 1, "left": 2, "right": 3}


def test_two_actions_parsed_case_insensitive():
    p = parse_response("<think>go</think> <answer> up || LEFT </answer>", action_lookup=LOOKUP, max_actions=2)
    assert p.format_ok and p.think == "go" and p.actions == (0, 2) and p.num_invalid == 0
    assert p.turn_is_valid


def test_extra_actions_cut_to_max_and_unknown_dropped():
    p = parse_response("<think></think><answer>Up || Jump || Down</answer>", action_lookup=LOOKUP, max_actions=2)
    assert p.action_names == ("Up", "Jump") and p.actions == (0,) and p.num_invalid == 1
    assert not p.turn_is_valid  # any invalid action is penalised


def test_empty_actions_dropped_and_special_tokens_stripped():
    p = parse_response("<think>a</think><answer>|| Right ||<|im_end|></answer>", action_lookup=LOOKUP, max_actions=2)
    assert p.actions == (3,)


def test_missing_tags_is_format_error():
    for text in ["Up", "<answer>Up</answer>", "<think>x</think>Up", "<think>x<answer>Up</answer>"]:
        p = parse_response(text, action_lookup=LOOKUP, max_actions=2)
        assert not p.format_ok and p.actions == () and not p.turn_is_valid


def test_answer_only_mode_and_free_text_env():
    p = parse_response("<answer>3 + 5 - 4</answer>", action_lookup=None, max_actions=1, enable_think=False)
    assert p.format_ok and p.actions == ("3 + 5 - 4",)


TAGS = st.sampled_from(["<think>", "</think>", "<answer>", "</answer>", " ", "\n", "\t", "Up", "||",
                        "x", "é", "\u3000", "<|im_end|>"])


@settings(max_examples=400, deadline=None)
@given(st.lists(TAGS, max_size=20))
def test_linear_matcher_equals_reference_regex(parts):
    text = "".join(parts)
    m = THINK_ANSWER_PATTERN.search(text)
    assert _match_think_answer(text) == (None if m is None else (m.group(1), m.group(2)))
    m = ANSWER_ONLY_PATTERN.search(text)
    assert _match_answer_only(text) == (None if m is None else m.group(1))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=500))
def test_parser_survives_any_text(text):
    p = parse_response(text, action_lookup=LOOKUP, max_actions=2)
    assert len(p.actions) <= 2


def _best_time(fn, repeats: int = 9) -> float:
    """Least wall time of `repeats` calls: the run least disturbed by other load on the machine."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def _scaling(make_text, small: int = 100_000, large: int = 1_000_000) -> float:
    """time(parse of `large` chars) / time(parse of `small` chars): ~10 if linear, ~100 if quadratic."""
    texts = {n: make_text(n) for n in (small, large)}
    parse = lambda n: parse_response(texts[n], action_lookup=LOOKUP, max_actions=2)  # noqa: E731
    return _best_time(lambda: parse(large)) / _best_time(lambda: parse(small))


ADVERSARIAL = {
    "tags": lambda n: ("<think></think>" * (n // 15 + 1))[:n] + "</answer>",
    "spaces": lambda n: "<think>x</think>" + " " * n + "x",
    "unclosed_answer": lambda n: "<think>x</think><answer>" + "</think><answer>" * (n // 16),
}


@pytest.mark.parametrize("kind", sorted(ADVERSARIAL))
def test_parser_is_linear_on_adversarial_input(kind):
    text = ADVERSARIAL[kind](1000)
    assert not parse_response(text, action_lookup=LOOKUP, max_actions=2).format_ok
    assert _scaling(ADVERSARIAL[kind]) < 40


def test_parser_runs_at_regex_speed_on_long_whitespace():
    """A 1 MB run of spaces after </think> costs about what the reference regex spends on it, not a
    Python step per character (a ratio of times taken on the same machine at the same moment)."""
    text = ADVERSARIAL["spaces"](1_000_000)
    ours = _best_time(lambda: parse_response(text, action_lookup=LOOKUP, max_actions=2))
    reference = _best_time(lambda: THINK_ANSWER_PATTERN.search(text))
    assert ours < 3 * reference


def test_system_prompt_matches_ragen_shape():
    s = system_prompt("Solve it.", "#: wall, _: empty", ["Up", "Down"], 10)
    assert s == ("You're a helpful assistant. Solve it.\nThe meaning of each symbol in the state is:\n"
                 "#: wall, _: empty\nYour available actions are:\nUp, Down\nYou can make up to 10 "
                 'actions, separated by the action separator " || "\n')


def test_full_mode_messages_turns_rewards_and_warning():
    h = [TurnRecord("S1", 10, response_text="<think>a</think><answer>Up || Dance</answer>", reward=-0.1,
                    actions_executed=1, invalid=True),  # one action ran, one missed the lookup: penalised
         TurnRecord("S2", 9, warn_invalid=True, response_text="bad", invalid=True),
         TurnRecord("S3", 9)]
    msgs = build_messages("SYS", h, 0, mode="full", max_tokens=100, enable_think=True, format_penalty=-0.1)
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant", "user"]
    fmt = ("You have 10 actions left. Always output: <think> [Your thoughts] </think> <answer> [your answer] "
           "</answer> with no "
           "extra text. Strictly follow this format. Max response length: 100 words (tokens).\n")
    assert msgs[1]["content"] == "\nTurn 1:\nState:\nS1\n" + fmt
    # RAGEN shows the env's reward alone (the format penalty is the trainer's), and its untouched 0 when no
    # action ran
    assert msgs[3]["content"].startswith("Reward:\n-0.1\n\nTurn 2:\nState:\nS2\nNo valid action provided")
    assert msgs[5]["content"].startswith("Reward:\n0\n\nTurn 3:")
    limited = build_messages("SYS", h, 2, mode="limited_multi_turn", max_tokens=100, enable_think=True,
                             format_penalty=-0.1)
    assert [m["role"] for m in limited] == ["system", "user"] and "Turn 3:" in limited[1]["content"]


def test_single_turn_mode_summarises_recent_turns():
    h = [TurnRecord("S1", 10, response_text="R1", reward=1.0), TurnRecord("S2", 9)]
    msgs = build_messages("SYS", h, 0, mode="single_turn", max_tokens=50, enable_think=False, format_penalty=-0.1)
    assert len(msgs) == 2
    c = msgs[1]["content"]
    assert c.startswith("Summary: 1 step(s) completed so far.") and "Turn 1 Action: R1\nTurn 1 Reward: 1.0\n" in c
    assert "Current Turn (Turn 2):\nState:\nS2\n" in c
    assert "Always output: <answer> [your answer] </answer> with no extra text." in c  # RAGEN's text, no think


def test_format_reward_prints_like_python():
    assert [format_reward(x) for x in (10.9, -0.1, 1, 0.0, -0.2000001)] == ["10.9", "-0.1", "1.0", "0.0", "-0.2"]


def test_lookups_match_case_insensitively_and_refuse_ambiguous_names():
    from ragen_jax.rollout.parsing import case_insensitive_lookup

    lookup = case_insensitive_lookup({"Up": 0, "DOWN": 1, "up": 0})
    assert lookup == {"up": 0, "down": 1} and case_insensitive_lookup(None) is None
    parsed = parse_response("<think></think><answer>uP || Down</answer>", action_lookup=lookup, max_actions=2)
    assert parsed.actions == (0, 1)
    with pytest.raises(ValueError, match="'up' twice with different ids"):
        case_insensitive_lookup({"Up": 0, "up": 1})


def test_recorded_response_is_ragens_llm_response():
    """What RAGEN keeps of a response for later prompts: bare tags, stripped parts, specials gone, the answer cut to
    max_actions (re-joined) only when it named more; an answer within the limit keeps its own spelling."""
    from ragen_jax.rollout.parsing import recorded_response

    record = lambda text, **kw: recorded_response(text, **{"enable_think": True, "max_actions": 2, **kw})  # noqa
    assert record("<think> plan\n</think>\n<answer> Up || Left || Down </answer>") == \
        "<think>plan</think><answer>Up || Left</answer>"
    assert (record("<think>a</think> <answer>Up||<|im_start|>Down</answer>")
            == "<think>a</think><answer>Up||Down</answer>")
    assert record("<think>a</think><answer> || </answer>") == "<think>a</think><answer>||</answer>"
    assert record("<think>no answer</think> Up") == "<think>no answer</think> Up"  # off the format: as it is
    assert record("<answer> 3 + 4 \n</answer>", enable_think=False) == "<answer>3 + 4</answer>"


def test_single_turn_summary_shows_the_recorded_response():
    h = [TurnRecord("S1", 10, response_text="<think> x </think>\n<answer>Up || Left || Down</answer>",
                    recorded_text="<think>x</think><answer>Up || Left</answer>", reward=1.0), TurnRecord("S2", 9)]
    msgs = build_messages("SYS", h, 0, mode="single_turn", max_tokens=50, enable_think=True, format_penalty=-0.1)
    assert "Turn 1 Action: <think>x</think><answer>Up || Left</answer>\nTurn 1 Reward: 1.0\n" in msgs[1]["content"]
