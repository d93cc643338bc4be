"""WebShop: purchase score on hand-made purchases, site navigation, data loading, env protocol."""

from __future__ import annotations

import dataclasses

import pytest

from envs.registry import make
from envs.webshop import text_match
from envs.webshop.data import load_catalog, parse_pricing
from envs.webshop.env import WebShopEnv, goal_index
from envs.webshop.generate import generate_raw, synthetic_catalog, write_raw
from envs.webshop.reward import purchase_score
from envs.webshop.site import Session, WebShopSite, parse_action
from envs.webshop.types import Goal, Product

SHOE = Product(
    asin="B000SHOE01", title="Acme Trail Running Shoes - Non Slip, Lightweight", query="men's running shoes",
    category="fashion", product_category="clothing, shoes & jewelry › men › shoes › athletic",
    description="A running shoe with a rubber sole.", bullet_points=("Breathable mesh upper.",),
    attributes=("non slip", "lightweight"), options={"color": ("black", "navy blue"), "size": ("9", "10")},
    pricing=(50.0,), price_tag="$50.0",
)
LAMP = dataclasses.replace(
    SHOE, asin="B000LAMP01", title="Bright Desk Lamp", query="led desk lamp", attributes=("dimmable",),
    product_category="tools › lighting › lamps", description="A lamp.", bullet_points=(), options={})
GOAL = Goal(asin=SHOE.asin, instruction_text="i need non slip lightweight running shoes in black, size 10",
            attributes=("non slip", "lightweight"), goal_options=("black", "10"), price_upper=60.0,
            query=SHOE.query, name=SHOE.title, category=SHOE.category, product_category=SHOE.product_category)


# ---------------------------------------------------------------- purchase score
def test_full_match_scores_one():
    score = purchase_score(SHOE, GOAL, price=50.0, chosen={"color": "black", "size": "10"})
    assert score.total == pytest.approx(1.0) and score.r_type == 1.0 and score.r_price


def test_wrong_option_loses_its_share():
    score = purchase_score(SHOE, GOAL, price=50.0, chosen={"color": "black", "size": "9"})
    assert score.total == pytest.approx(4 / 5)  # 2 attrs + 1 of 2 options + price, out of 5
    assert score.r_option == pytest.approx(0.5)


def test_no_options_chosen():
    assert purchase_score(SHOE, GOAL, price=50.0, chosen={}).total == pytest.approx(3 / 5)


def test_over_budget_loses_price_share():
    score = purchase_score(SHOE, GOAL, price=75.0, chosen={"color": "black", "size": "10"})
    assert not score.r_price and score.total == pytest.approx(4 / 5)


def test_wrong_product_type_scores_zero():
    score = purchase_score(LAMP, GOAL, price=20.0, chosen={})
    assert score.title_score == 0.0 and score.r_type == 0.0 and score.total == 0.0


def test_attribute_found_in_text_counts():
    goal = dataclasses.replace(GOAL, attributes=("rubber sole",), goal_options=())
    assert purchase_score(SHOE, goal, price=50.0, chosen={}).total == pytest.approx(1.0)


def test_size_is_exact_but_color_is_normalised():
    goal = dataclasses.replace(GOAL, goal_options=("dark blue", "10"))
    assert purchase_score(SHOE, goal, 50.0, {"color": "navy blue", "size": "10"}).total == pytest.approx(1.0)


def test_token_set_ratio_matches_thefuzz_examples():
    assert text_match.token_set_ratio("fuzzy was a bear", "fuzzy fuzzy was a bear") == 100
    assert text_match.token_set_ratio("non-slip", "Non Slip") == 100
    assert round(text_match.ratio("this is a test", "this is a test!")) == 97
    assert text_match.token_set_ratio("memory foam", "rubber sole") < 50
    assert text_match.normalize_color("dark navy blue") == "blue"


def test_parse_pricing():
    assert parse_pricing("$12.99") == ((12.99,), "$12.99")
    assert parse_pricing("$10.00 - $20.00") == ((10.0, 20.0), "$10.0 to $20.0")
    assert parse_pricing(None) == ((100.0,), "$100.0")


# ---------------------------------------------------------------- site navigation
@pytest.fixture(scope="module")
def site() -> WebShopSite:
    from envs.webshop.env import _site
    return _site(None, None, 0)


def test_parse_action():
    assert parse_action("click[Buy Now]") == ("click", "Buy Now")
    assert parse_action("search[red shoes]") == ("search", "red shoes")
    assert parse_action("buy") == ("buy", None)


def test_navigation_sequence(site):
    goal = site.catalog.goals[0]
    s = Session(goal=goal)
    assert site.available_actions(s) == ["search[<content>]"]
    assert site.step(s, "click[buy now]") == (False, False)  # not on this page
    assert site.step(s, f"search[{goal.query}]") == (True, False)
    assert s.page == "results" and "Page 1 (Total results:" in site.render(s)
    assert "click[< prev]" not in site.available_actions(s)
    assert site.step(s, "click[next >]") == (True, False)
    assert s.page_num == 2 and "click[< prev]" in site.available_actions(s)
    assert site.step(s, "click[< prev]") == (True, False) and s.page_num == 1
    first = site._page_products(s)[0].asin.lower()
    assert first in site.clickables(s)
    assert site.step(s, f"click[{first}]") == (True, False)
    assert s.page == "item" and s.asin == first.upper()
    product = site.catalog.by_asin[s.asin]
    assert product.title in site.render(s)
    assert site.step(s, "click[description]") == (True, False)
    assert s.page == "sub" and product.description in site.render(s)
    assert site.step(s, "click[< prev]") == (True, False) and s.page == "item"
    name, values = next(iter(product.options.items()))
    assert site.step(s, f"click[{values[-1]}]") == (True, False)
    assert s.options == {name: values[-1]}
    assert site.step(s, "click[< prev]") == (True, False) and s.page == "results" and s.options == {}
    assert site.step(s, "click[back to search]") == (True, False) and s.page == "search"


def test_next_page_is_always_offered_until_an_empty_page(site):
    """WebShop's results page always has `Next >`; RAGEN drops `click[next >]` from the list only on a page without
    products (its actions are then just back/prev: `end_of_page`), yet the click still works there."""
    s = Session(goal=site.catalog.goals[0])
    site.step(s, "search[shoes pants lamp bed pillow]")
    last = -(-len(s.hits) // 10)
    for page in range(1, last + 1):
        assert s.page_num == page and "click[next >]" in site.available_actions(s)
        assert "Next >" in site.render(s).split(" [SEP] ")
        assert site.step(s, "click[next >]") == (True, False)
    assert s.page_num == last + 1 and site._page_products(s) == []
    assert site.available_actions(s) == ["click[back to search]", "click[< prev]"]
    assert site.render(s).endswith(f"[SEP] Page {last + 1} (Total results: {len(s.hits)}) [SEP] < Prev [SEP] Next >")
    assert site.step(s, "click[next >]") == (True, False) and s.page_num == last + 2


def test_end_of_page_is_ragens_back_and_prev_only_page():
    env = make("WebShop")
    env.reset(3)
    _, _, _, _, info = env.step("search[shoes]")
    assert not info["end_of_page"]
    for _ in range(6):  # at most 50 hits: page 6 is past the end
        if not env.site._page_products(env.session):
            break
        assert not info["end_of_page"]
        _, _, _, _, info = env.step("click[next >]")
    assert info["end_of_page"] and env.session.page_num > 1
    env.step("click[< prev]")
    env.step(f"click[{env.site._page_products(env.session)[0].asin.lower()}]")
    _, _, _, _, info = env.step("click[features]")
    assert info["end_of_page"]  # RAGEN's test is on the action list, which a sub-page shares


# ---------------------------------------------------------------- env
def _buy_target(env: WebShopEnv, with_options: bool) -> tuple[float, bool, dict]:
    goal = env.session.goal
    product = env.site.catalog.by_asin[goal.asin]
    env.step(f"search[{product.title}]")
    obs, r, done, _, info = env.step(f"click[{goal.asin.lower()}]")
    assert not done and info["action_is_valid"], obs
    if with_options:
        for value in goal.goal_options:
            env.step(f"click[{value}]")
    _, reward, done, truncated, info = env.step("click[Buy Now]")
    assert done and not truncated
    return reward, info["success"], info


def test_env_buying_the_goal_product_succeeds():
    env = make("WebShop")
    env.reset(10000)
    reward, success, info = _buy_target(env, with_options=True)
    assert success and reward == 1.0 and info["raw_reward"] >= 1.0


def test_env_binary_and_score_modes_without_options():
    env, env_score = make("WebShop"), make("WebShop", reward_mode="score")
    for e in (env, env_score):
        e.reset(10001)
    reward, success, info = _buy_target(env, with_options=False)
    reward_s, _, info_s = _buy_target(env_score, with_options=False)
    assert not success and reward == 0.0 and 0.0 < info["raw_reward"] < 1.0
    assert reward_s == pytest.approx(info_s["raw_reward"]) == pytest.approx(info["raw_reward"])


def test_env_invalid_action_is_reported_and_changes_nothing():
    env = make("WebShop")
    obs, _ = env.reset(3)
    page = env.site.render(env.session)
    obs2, reward, done, truncated, info = env.step("click[nothing here]")
    assert env.site.render(env.session) == page and reward == 0.0 and not done and not truncated
    assert not info["action_is_valid"] and not info["action_is_effective"]
    obs3, *_ = env.step("click[nothing here]")
    assert obs3 == obs2 and obs2.startswith(page + ".")
    assert obs.endswith("\n You must choose from these actions:search[<content>].")


# RAGEN's ragen/env/webshop/env.py RENDER_INSTRUCTIONS, verbatim.
RAGEN_TIPS = [
    "We must buy a product within 10 actions. It doesn't have to match perfectly with description.",
    "Search term should not include details like size, color.",
    "Never search for more than 2 times.",
    "Do not be too strict about the description, it's more important to buy one that is close enough within action "
    "limit.",
    "Prioritize click a product in the current page over going to next page.",
    "Almost never click[next >] for more than 2 times.",
    "Almost never click[< prev] unless you are sure the product is on one of the previous pages.",
    "If you have less than 3 actions left, just buy the first product you see in the current page.",
    "If an matching option exists, make sure to click[size] then click[color], one at a time, before click[buy now], "
    "but don't have to if only 1 action left, in that case you just click[buy now]. Never click description.",
]


def test_instruction_and_state_text_are_ragens():
    """RAGEN's WebShop env_instruction (config/envs.yaml) and its state text (prepare_render_cache): the page, ".",
    the tips joined by newlines (no newline before the first), then " You must choose from these actions:" + list."""
    env = make("WebShop")
    assert env.instruction() == (
        "You are browsing an online shop. Based on the instruction, buy a product that close to the production "
        "description. You need to search, read the search results, pick a product, choose the size and color and buy. "
        "You should only choose action from the available actions list provided later.  Example process: I need a "
        "gingko light and 20x20 pillow cover that is hand painted. First search[gingko light 20x20 pillow cover hand "
        "painted], answer format: <answer>search[blanket with fleece throw]</answer>. Valid answer is "
        "search[<keywords>] or click[<clickable>].")
    obs, info = env.reset(3)
    page = "Instruction: " + env.session.goal.instruction_text  # RAGEN's reset state: the instruction header only
    tail = "\n You must choose from these actions:" + ", ".join(info["available_actions"]) + "."
    assert obs == page + "." + "\n".join(RAGEN_TIPS) + tail
    assert env.site.render(env.session).startswith("WebShop [SEP] Instruction: [SEP] ")
    obs, *_ = env.step("search[shoes]")
    actions = env.site.available_actions(env.session)
    assert obs == env.site.render(env.session) + "." + "\n".join(RAGEN_TIPS) + \
        "\n You must choose from these actions:" + ", ".join(actions) + "."
    quiet = make("WebShop", show_tips=False)
    obs, info = quiet.reset(3)
    assert obs == page + "." + tail


def test_env_seeds_are_deterministic_and_splits_disjoint():
    env = make("WebShop")
    assert env.reset(7)[0] == env.reset(7)[0]
    n = len(env.site.catalog.goals)
    test = {goal_index(s, "test", n) for s in range(200)}
    val = {goal_index(s, "val", n) for s in range(200)}
    train = {goal_index(s, "train", n) for s in range(2000)}
    assert not (test & val) and not (test & train) and not (val & train)
    assert len(test | val | train) == n


def test_env_max_steps_truncates():
    env = make("WebShop", max_steps=2)
    env.reset(0)
    assert env.step("search[shoes]")[3] is False
    _, _, done, truncated, _ = env.step("click[back to search]")
    assert truncated and not done


# ---------------------------------------------------------------- data files
def test_generated_files_load_like_the_in_memory_catalogue(tmp_path):
    write_raw(str(tmp_path), num_products=40, seed=3)
    loaded = load_catalog(str(tmp_path), seed=3)
    built = synthetic_catalog(40, 3)
    assert loaded.products == built.products and loaded.goals == built.goals
    assert generate_raw(40, 3) == generate_raw(40, 3)
    env = WebShopEnv(data_dir=str(tmp_path), seed=3)
    assert "Instruction:" in env.reset(0)[0]


def test_missing_data_dir_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a folder"):
        load_catalog(str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match="No products file"):
        load_catalog(str(tmp_path))


def test_search_runs_from_any_page_but_is_flagged_invalid():
    """WebShop's text env runs `search[...]` on every page (web_agent_text_env.step checks no search bar); RAGEN
    only flags it `action_is_valid=False` when the page has no search bar."""
    env = make("WebShop")
    env.reset(3)
    env.step("search[shoes]")
    obs, reward, done, _, info = env.step("search[lamp]")
    assert env.session.page == "results" and env.session.keywords == "lamp" and env.session.page_num == 1
    assert not info["action_is_valid"] and info["action_is_effective"] and reward == 0.0 and not done
    first = env.site._page_products(env.session)[0].asin.lower()
    env.step(f"click[{first}]")
    _, _, _, _, info = env.step("search[shoes]")
    assert env.session.page == "results" and env.session.asin is None and not info["action_is_valid"]


def test_element_text_is_only_lower_cased_as_in_webshop(site):
    """WebShop lower-cases the bracket text and nothing else: inner spaces make an unknown element, and `.` in its
    action pattern does not cross a newline."""
    assert parse_action("search[red\nshoes]") == ("search[red\nshoes]", None)
    s = Session(goal=site.catalog.goals[0])
    assert site.step(s, "search[red\nshoes]") == (False, False) and s.page == "search"
    site.step(s, "search[shoes]")
    first = site._page_products(s)[0].asin
    assert site.step(s, f"click[ {first} ]") == (False, False) and s.page == "results"
    assert site.step(s, f"click[{first}]") == (True, False) and s.page == "item"
    assert site.step(s, "click[Buy Now ]") == (False, False) and s.page == "item"


def test_reviews_page_is_webshops_template_text():
    """WebShop's review page shows each review as "title" (quoted), its score, its body; no reviews, no text."""
    from envs.webshop.types import Review
    reviewed = dataclasses.replace(SHOE, reviews=(Review("Great", 5.0, "Fits well."), Review("Meh", 2.5, "Small.")))
    assert WebShopSite._sub_page_text(reviewed, "reviews") == ['"Great"', "5", "Fits well.", '"Meh"', "2.5", "Small."]
    assert WebShopSite._sub_page_text(SHOE, "reviews") == []
