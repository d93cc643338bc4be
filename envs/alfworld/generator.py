"""Seeded household games in ALFWorld's six task types, written as `.tw-pddl` game data with a walkthrough.

A seed fixes the task type (among `task_types`), a room (kitchen, living room, bedroom or bathroom), its
receptacles (numbered instances: "cabinet 3"), the objects in them, the goal and its phrasing. Games are pure
data (no engine needed to make one); TextWorld's PDDL engine plays them (envs.alfworld.backend). The walkthrough
is the plan the generator knows solves the game (go to the object, open what is closed, take it, treat it, go to
the goal receptacle, move it there).
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from envs.alfworld.logic import DOMAIN, GRAMMAR, TASK_PLACEHOLDER
from envs.alfworld.names import display_names

# ALFWorld's task types by its config ids (alfworld_config.yaml env.task_types).
TASK_TYPES = {1: "pick_and_place_simple", 2: "look_at_obj_in_light", 3: "pick_clean_then_place_in_recep",
              4: "pick_heat_then_place_in_recep", 5: "pick_cool_then_place_in_recep", 6: "pick_two_obj_and_place"}

OPENABLE = frozenset({"cabinet", "drawer", "fridge", "microwave", "dresser"})
ROLES = {"microwave": "heats", "stoveburner": "heats", "fridge": "cools", "sinkbasin": "washes"}
CONTAINERS = OPENABLE | {"sinkbasin", "garbagecan"}  # "in" these, "on" the others

# room -> receptacle type -> (fewest, most) instances
ROOMS: dict[str, dict[str, tuple[int, int]]] = {
    "kitchen": {"countertop": (1, 3), "cabinet": (2, 5), "drawer": (1, 3), "fridge": (1, 1), "microwave": (1, 1),
                "stoveburner": (1, 3), "sinkbasin": (1, 1), "diningtable": (0, 1), "garbagecan": (1, 1),
                "shelf": (0, 2)},
    "livingroom": {"sofa": (1, 1), "armchair": (0, 1), "coffeetable": (1, 1), "sidetable": (1, 2), "shelf": (1, 3),
                   "drawer": (1, 3), "cabinet": (0, 2), "garbagecan": (1, 1)},
    "bedroom": {"bed": (1, 1), "desk": (1, 1), "sidetable": (1, 2), "dresser": (1, 1), "drawer": (2, 4),
                "shelf": (1, 2), "garbagecan": (1, 1)},
    "bathroom": {"countertop": (1, 1), "sinkbasin": (1, 2), "cabinet": (1, 3), "drawer": (0, 2), "toilet": (1, 1),
                 "garbagecan": (1, 1), "shelf": (0, 1)},
}
_FOOD_AT = ("countertop", "diningtable", "fridge", "cabinet", "garbagecan")
_DISH_AT = ("countertop", "diningtable", "cabinet", "shelf", "sinkbasin", "drawer", "microwave")
_SMALL_AT = ("sidetable", "desk", "shelf", "drawer", "dresser", "coffeetable", "sofa", "armchair", "bed", "cabinet")
_BATH_AT = ("countertop", "cabinet", "shelf", "toilet", "drawer", "sinkbasin")
# room -> object type -> receptacle types it may start in
OBJECTS: dict[str, dict[str, tuple[str, ...]]] = {
    "kitchen": {**{o: _FOOD_AT for o in ("apple", "tomato", "potato", "egg", "lettuce", "bread")},
                **{o: _DISH_AT for o in ("mug", "cup", "plate", "bowl", "pan", "fork", "knife", "spoon", "spatula")}},
    "livingroom": {o: _SMALL_AT for o in ("book", "remotecontrol", "keychain", "creditcard", "pillow", "vase",
                                          "statue", "newspaper", "box", "laptop")},
    "bedroom": {o: _SMALL_AT for o in ("book", "cellphone", "pen", "pencil", "alarmclock", "keychain", "creditcard",
                                       "pillow", "laptop", "cd")},
    "bathroom": {o: _BATH_AT for o in ("soapbar", "cloth", "candle", "toiletpaper", "spraybottle", "soapbottle")},
}
_TREATABLE = ("apple", "tomato", "potato", "egg", "lettuce", "bread", "mug", "cup", "plate", "bowl")
# task type -> (rooms it is set in, object types it asks for)
TASK_SETTINGS: dict[str, tuple[tuple[str, ...], tuple[str, ...] | None]] = {
    "pick_and_place_simple": (tuple(ROOMS), None),
    "look_at_obj_in_light": (("bedroom", "livingroom"), ("book", "cellphone", "pen", "alarmclock", "remotecontrol",
                                                        "keychain", "creditcard", "cd", "newspaper")),
    "pick_clean_then_place_in_recep": (("kitchen", "bathroom"), _TREATABLE + ("fork", "knife", "spoon", "spatula",
                                                                            "pan", "cloth", "soapbar")),
    "pick_heat_then_place_in_recep": (("kitchen",), _TREATABLE),
    "pick_cool_then_place_in_recep": (("kitchen",), _TREATABLE + ("pan",)),
    "pick_two_obj_and_place": (tuple(ROOMS), None),
}
GOAL_TEXTS = {  # our phrasings, one picked per seed ({ao}: "an apple", {ar}: "a cabinet")
    "pick_and_place_simple": ("put {ao} {p} {ar}", "place some {o} {p} {ar}"),
    "look_at_obj_in_light": ("look at the {o} under the desklamp", "examine {ao} by the light of the desklamp"),
    "pick_clean_then_place_in_recep": ("put a clean {o} {p} {ar}", "wash {ao} and put it {p} {ar}"),
    "pick_heat_then_place_in_recep": ("put a hot {o} {p} {ar}", "heat {ao} and put it {p} {ar}"),
    "pick_cool_then_place_in_recep": ("put a cool {o} {p} {ar}", "chill {ao} and put it {p} {ar}"),
    "pick_two_obj_and_place": ("put two {os} {p} {ar}", "find two {os} and put them {p} {ar}"),
}
_NOT_GOALS = frozenset(ROLES) | {"garbagecan"}
_LAMP_AT = ("desk", "sidetable")
_TREAT_ACTION = {"pick_clean_then_place_in_recep": ("washes", "clean"), "pick_heat_then_place_in_recep":
                 ("heats", "heat"), "pick_cool_then_place_in_recep": ("cools", "cool")}


@dataclasses.dataclass
class Scene:
    """One generated game before it is written out: ids are PDDL object names (`apple_bar_2`)."""

    task_type: str
    goal: str
    receptacles: dict[str, str]  # id -> type
    objects: dict[str, str]  # id -> type
    placed: dict[str, str]  # object id -> receptacle id
    targets: list[str]  # object ids the walkthrough uses
    goal_receptacle: str | None  # receptacle id (None for look_at_obj_in_light)
    treat_with: str | None  # receptacle id that cleans/heats/cools the target
    lamp: str | None  # object id of the desklamp


def _plural(word: str) -> str:
    if word.endswith("y") and word[-2:-1] not in "aeiou":
        return word[:-1] + "ies"
    if word.endswith(("s", "x", "ch", "sh")) or word in ("potato", "tomato"):
        return word + "es"
    return word[:-2] + "ves" if word.endswith("fe") else word + "s"


def _with_article(word: str) -> str:
    return ("an " if word[0] in "aeiou" else "a ") + word


def _receptacle_id(kind: str, n: int) -> str:
    return f"sink_bar_{n}_bar_sinkbasin" if kind == "sinkbasin" else f"{kind}_bar_{n}"


def make_scene(seed: int, task_types: tuple[int, ...] = tuple(TASK_TYPES)) -> Scene:
    """The game of `seed` among `task_types` (ALFWorld's ids 1-6)."""
    rng = random.Random(seed)
    task_type = TASK_TYPES[rng.choice(sorted(task_types))]
    rooms, wanted = TASK_SETTINGS[task_type]
    room = rng.choice(rooms)
    receptacles = {}
    for kind, (low, high) in ROOMS[room].items():
        for n in range(1, rng.randint(low, high) + 1):
            receptacles[_receptacle_id(kind, n)] = kind
    by_kind: dict[str, list[str]] = {}
    for rid, kind in receptacles.items():
        by_kind.setdefault(kind, []).append(rid)
    catalogue = OBJECTS[room]
    target = rng.choice([o for o in (wanted or catalogue) if o in catalogue])
    goal_rid = treat_rid = lamp = None
    if task_type == "look_at_obj_in_light":
        lamp_at = [rid for kind in _LAMP_AT for rid in by_kind.get(kind, [])]
        lamp, lamp_rid = "desklamp_bar_1", rng.choice(lamp_at)
    else:
        goals = [rid for rid, kind in receptacles.items() if kind not in _NOT_GOALS]
        goal_rid = rng.choice(goals)
    if task_type in _TREAT_ACTION:
        role = _TREAT_ACTION[task_type][0]
        treat_rid = rng.choice([rid for rid, kind in receptacles.items() if ROLES.get(kind) == role])
    count = 2 if task_type == "pick_two_obj_and_place" else 1
    objects, placed = {}, {}
    allowed = lambda kind: [rid for rid, k in receptacles.items()  # noqa: E731 - one-line filter
                            if k in catalogue[kind] and receptacles[rid] != receptacles.get(goal_rid)]
    for n in range(1, count + rng.randint(0, 1) + 1):
        objects[f"{target}_bar_{n}"] = target
        placed[f"{target}_bar_{n}"] = rng.choice(allowed(target) or [r for r, k in receptacles.items()
                                                                     if k != receptacles.get(goal_rid)])
    for kind in rng.sample(sorted(set(catalogue) - {target}), k=min(6, len(catalogue) - 1)):
        for n in range(1, rng.randint(1, 2) + 1):
            spots = [rid for rid, k in receptacles.items() if k in catalogue[kind]] or list(receptacles)
            objects[f"{kind}_bar_{n}"] = kind
            placed[f"{kind}_bar_{n}"] = rng.choice(spots)
    if lamp is not None:
        objects[lamp], placed[lamp] = "desklamp", lamp_rid
    names = {"o": target, "ao": _with_article(target), "os": _plural(target)}
    if goal_rid is not None:
        kind = receptacles[goal_rid]
        names.update(ar=_with_article(kind), p="in" if kind in CONTAINERS else "on")
    goal = rng.choice(GOAL_TEXTS[task_type]).format(**names)
    targets = sorted(o for o, kind in objects.items() if kind == target)[:count]
    return Scene(task_type, goal, receptacles, objects, placed, targets, goal_rid, treat_rid, lamp)


def walkthrough(scene: Scene, names: dict[str, str]) -> list[str]:
    """Commands that solve `scene`, with the display `names` of its ids."""
    at: list[str | None] = [None]
    opened: set[str] = set()
    commands: list[str] = []

    def go(rid: str) -> None:
        if at[0] != rid:
            commands.append(f"go to {names[rid]}")
            at[0] = rid
        if scene.receptacles[rid] in OPENABLE and rid not in opened:
            commands.append(f"open {names[rid]}")
            opened.add(rid)

    for target in scene.targets:
        source = scene.placed[target]
        go(source)
        commands.append(f"take {names[target]} from {names[source]}")
        if scene.treat_with is not None:
            go(scene.treat_with)
            verb = _TREAT_ACTION[scene.task_type][1]
            commands.append(f"{verb} {names[target]} with {names[scene.treat_with]}")
        if scene.goal_receptacle is not None:
            go(scene.goal_receptacle)
            commands.append(f"move {names[target]} to {names[scene.goal_receptacle]}")
    if scene.lamp is not None:
        go(scene.placed[scene.lamp])
        commands.append(f"use {names[scene.lamp]}")
    return commands


def problem_pddl(scene: Scene) -> str:
    """The PDDL problem of `scene`: the agent in the middle of the room, one location per receptacle."""
    otypes = sorted(set(scene.objects.values()))
    rtypes = sorted(set(scene.receptacles.values()))
    locations = {rid: f"loc_bar_{i + 1}" for i, rid in enumerate(scene.receptacles)}
    facts = ["(atlocation agent1 loc_bar_0)"]
    for rid, kind in scene.receptacles.items():
        facts += [f"(receptacleatlocation {rid} {locations[rid]})", f"(receptacletype {rid} {kind}type)"]
        facts += [f"(openable {rid})"] if kind in OPENABLE else []
        facts += [f"({ROLES[kind]} {rid})"] if kind in ROLES else []
    for oid, kind in scene.objects.items():
        facts += [f"(inreceptacle {oid} {scene.placed[oid]})", f"(objecttype {oid} {kind}type)"]
    if scene.lamp is not None:
        facts.append(f"(toggleable {scene.lamp})")
    target_type = f"{scene.objects[scene.targets[0]]}type"
    goal = _goal(scene, target_type)
    objects = ["agent1 - agent", " ".join(["loc_bar_0", *locations.values()]) + " - location",
               " ".join(scene.receptacles) + " - receptacle", " ".join(scene.objects) + " - object",
               " ".join(f"{t}type" for t in otypes) + " - otype", " ".join(f"{t}type" for t in rtypes) + " - rtype"]
    return ("(define (problem household)\n  (:domain household)\n  (:objects\n    " + "\n    ".join(objects) +
            ")\n  (:init\n    " + "\n    ".join(facts) + ")\n  (:goal " + goal + "))\n")


def _goal(scene: Scene, target_type: str) -> str:
    if scene.task_type == "look_at_obj_in_light":
        return ("(exists (?o - object ?t - object ?r - receptacle ?l - location) (and "
                f"(objecttype ?o {target_type}) (toggleable ?t) (istoggled ?t) (inreceptacle ?t ?r) "
                "(receptacleatlocation ?r ?l) (atlocation agent1 ?l) (holds agent1 ?o)))")
    recep_type = f"{scene.receptacles[scene.goal_receptacle]}type"
    if scene.task_type == "pick_two_obj_and_place":
        return ("(exists (?o1 - object ?o2 - object ?r - receptacle) (and (not (= ?o1 ?o2)) "
                f"(objecttype ?o1 {target_type}) (objecttype ?o2 {target_type}) (receptacletype ?r {recep_type}) "
                "(inreceptacle ?o1 ?r) (inreceptacle ?o2 ?r)))")
    state = {"pick_clean_then_place_in_recep": " (isclean ?o)", "pick_heat_then_place_in_recep": " (ishot ?o)",
             "pick_cool_then_place_in_recep": " (iscool ?o)"}.get(scene.task_type, "")
    return (f"(exists (?o - object ?r - receptacle) (and (objecttype ?o {target_type}) "
            f"(receptacletype ?r {recep_type}) (inreceptacle ?o ?r){state}))")


def generate_game(seed: int, task_types: tuple[int, ...] = tuple(TASK_TYPES)) -> dict[str, Any]:
    """The `.tw-pddl` game data of `seed` (ALFWorld's game-file keys) plus its task type, goal and walkthrough."""
    bad = [t for t in task_types if t not in TASK_TYPES]
    if bad or not task_types:
        raise ValueError(f"task_types must be ALFWorld's task-type ids {sorted(TASK_TYPES)}, got {list(task_types)}.")
    scene = make_scene(seed, tuple(task_types))
    names = display_names(["agent1", "loc_bar_0", *scene.receptacles, *scene.objects])
    return {"pddl_domain": DOMAIN, "grammar": GRAMMAR.replace(TASK_PLACEHOLDER, scene.goal),
            "pddl_problem": problem_pddl(scene), "solvable": True, "task_type": scene.task_type, "goal": scene.goal,
            "walkthrough": walkthrough(scene, names)}
