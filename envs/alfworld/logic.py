"""The household world's rules (a PDDL domain) and texts (a TextWorld grammar) for generated games.

Written for ragen-jax in ALFWorld's command language: `go to R`, `open R`, `close R`, `take O from R`, `move O to R`,
`heat O with R`, `cool O with R`, `clean O with R`, `use O`, `examine R`, `examine O`, `inventory`, `look`. A game
file joins them with a problem (envs.alfworld.generator) into the `.tw-pddl` JSON that TextWorld's PDDL engine
(`textworld.envs.pddl.PddlEnv`) plays, the format ALFWorld's own game files have. Grammar texts may not hold ';'
(TextWorld's grammar parser ends a text there).
"""

DOMAIN = """
(define (domain household)
  (:requirements :adl)
  (:types agent location receptacle object otype rtype)
  (:predicates
    (atlocation ?a - agent ?l - location)
    (receptacleatlocation ?r - receptacle ?l - location)
    (inreceptacle ?o - object ?r - receptacle)
    (openable ?r - receptacle)
    (opened ?r - receptacle)
    (holds ?a - agent ?o - object)
    (holdsany ?a - agent)
    (heats ?r - receptacle)
    (cools ?r - receptacle)
    (washes ?r - receptacle)
    (ishot ?o - object)
    (iscool ?o - object)
    (isclean ?o - object)
    (toggleable ?o - object)
    (istoggled ?o - object)
    (objecttype ?o - object ?t - otype)
    (receptacletype ?r - receptacle ?t - rtype)
    (noticed ?a - agent))
  (:action gotolocation
    :parameters (?a - agent ?lstart - location ?lend - location ?r - receptacle)
    :precondition (and (atlocation ?a ?lstart) (receptacleatlocation ?r ?lend) (not (= ?lstart ?lend)))
    :effect (and (not (atlocation ?a ?lstart)) (atlocation ?a ?lend)))
  (:action openobject
    :parameters (?a - agent ?l - location ?r - receptacle)
    :precondition (and (atlocation ?a ?l) (receptacleatlocation ?r ?l) (openable ?r) (not (opened ?r)))
    :effect (opened ?r))
  (:action closeobject
    :parameters (?a - agent ?l - location ?r - receptacle)
    :precondition (and (atlocation ?a ?l) (receptacleatlocation ?r ?l) (openable ?r) (opened ?r))
    :effect (not (opened ?r)))
  (:action pickupobject
    :parameters (?a - agent ?l - location ?o - object ?r - receptacle)
    :precondition (and (atlocation ?a ?l) (receptacleatlocation ?r ?l) (inreceptacle ?o ?r) (not (holdsany ?a))
                       (not (toggleable ?o)) (or (not (openable ?r)) (opened ?r)))
    :effect (and (not (inreceptacle ?o ?r)) (holds ?a ?o) (holdsany ?a)))
  (:action putobject
    :parameters (?a - agent ?l - location ?o - object ?r - receptacle)
    :precondition (and (atlocation ?a ?l) (receptacleatlocation ?r ?l) (holds ?a ?o)
                       (or (not (openable ?r)) (opened ?r)))
    :effect (and (inreceptacle ?o ?r) (not (holds ?a ?o)) (not (holdsany ?a))))
  (:action heatobject
    :parameters (?a - agent ?l - location ?o - object ?r - receptacle)
    :precondition (and (atlocation ?a ?l) (receptacleatlocation ?r ?l) (holds ?a ?o) (heats ?r))
    :effect (and (ishot ?o) (not (iscool ?o))))
  (:action coolobject
    :parameters (?a - agent ?l - location ?o - object ?r - receptacle)
    :precondition (and (atlocation ?a ?l) (receptacleatlocation ?r ?l) (holds ?a ?o) (cools ?r))
    :effect (and (iscool ?o) (not (ishot ?o))))
  (:action cleanobject
    :parameters (?a - agent ?l - location ?o - object ?r - receptacle)
    :precondition (and (atlocation ?a ?l) (receptacleatlocation ?r ?l) (holds ?a ?o) (washes ?r))
    :effect (isclean ?o))
  (:action toggleobject
    :parameters (?a - agent ?l - location ?o - object ?r - receptacle)
    :precondition (and (atlocation ?a ?l) (receptacleatlocation ?r ?l) (inreceptacle ?o ?r) (toggleable ?o)
                       (not (istoggled ?o)))
    :effect (istoggled ?o))
  (:action examinereceptacle
    :parameters (?a - agent ?l - location ?r - receptacle)
    :precondition (and (atlocation ?a ?l) (receptacleatlocation ?r ?l))
    :effect (noticed ?a))
  (:action examineobject
    :parameters (?a - agent ?o - object)
    :precondition (holds ?a ?o)
    :effect (noticed ?a))
  (:action inventory
    :parameters (?a - agent ?l - location)
    :precondition (atlocation ?a ?l)
    :effect (noticed ?a))
  (:action look
    :parameters (?a - agent ?l - location)
    :precondition (atlocation ?a ?l)
    :effect (noticed ?a))
)
"""

TASK_PLACEHOLDER = "TASK_TEXT"

GRAMMAR = '''
grammar :: """
{
  "intro": [{"rhs": "-= Household task =-\\n\\n#look.feedback#\\n\\n#task#"}],
  "task": [{"rhs": "Your task is to: TASK_TEXT."}],
  "receptacle.view": [
    {"condition": "openable(r:receptacle) & opened(r:receptacle)",
     "rhs": "The {r.name} is open. Inside it, you see [{o.indefinite + ' ' + o.name | inreceptacle(o:object, r:receptacle)}]."},
    {"condition": "openable(r:receptacle)", "rhs": "The {r.name} is closed."},
    {"rhs": "On the {r.name}, you see [{o.indefinite + ' ' + o.name | inreceptacle(o:object, r:receptacle)}]."}
  ],
  "list_empty": [{"rhs": "nothing"}],
  "list_separator": [{"rhs": ", "}],
  "list_last_separator": [{"rhs": ", and "}]
}
""";

action gotolocation {
  template :: "go to {r}";
  feedback :: "#goto.feedback#";
  grammar :: """{"goto.feedback": [{"rhs": "You walk over to the {r.name}. #receptacle.view#"}]}""";
}

action openobject {
  template :: "open {r}";
  feedback :: "#open.feedback#";
  grammar :: """{"open.feedback": [{"rhs": "You open the {r.name}. #receptacle.view#"}]}""";
}

action closeobject {
  template :: "close {r}";
  feedback :: "#close.feedback#";
  grammar :: """{"close.feedback": [{"rhs": "You close the {r.name}."}]}""";
}

action pickupobject {
  template :: "take {o} from {r}";
  feedback :: "#take.feedback#";
  grammar :: """{"take.feedback": [{"rhs": "You take the {o.name} from the {r.name}."}]}""";
}

action putobject {
  template :: "move {o} to {r}";
  feedback :: "#put.feedback#";
  grammar :: """{"put.feedback": [
    {"condition": "openable(r:receptacle)", "rhs": "You put the {o.name} in the {r.name}."},
    {"rhs": "You put the {o.name} on the {r.name}."}]}""";
}

action heatobject {
  template :: "heat {o} with {r}";
  feedback :: "#heat.feedback#";
  grammar :: """{"heat.feedback": [{"rhs": "You warm the {o.name} up with the {r.name}."}]}""";
}

action coolobject {
  template :: "cool {o} with {r}";
  feedback :: "#cool.feedback#";
  grammar :: """{"cool.feedback": [{"rhs": "You chill the {o.name} in the {r.name}."}]}""";
}

action cleanobject {
  template :: "clean {o} with {r}";
  feedback :: "#clean.feedback#";
  grammar :: """{"clean.feedback": [{"rhs": "You wash the {o.name} in the {r.name}."}]}""";
}

action toggleobject {
  template :: "use {o}";
  feedback :: "#use.feedback#";
  grammar :: """{"use.feedback": [{"rhs": "You switch on the {o.name}."}]}""";
}

action examinereceptacle {
  template :: "examine {r}";
  feedback :: "#receptacle.view#";
}

action examineobject {
  template :: "examine {o}";
  feedback :: "#object.view#";
  grammar :: """{"object.view": [
    {"condition": "ishot(o:object) & isclean(o:object)", "rhs": "The {o.name} is hot and clean."},
    {"condition": "iscool(o:object) & isclean(o:object)", "rhs": "The {o.name} is cold and clean."},
    {"condition": "ishot(o:object)", "rhs": "The {o.name} is hot."},
    {"condition": "iscool(o:object)", "rhs": "The {o.name} is cold."},
    {"condition": "isclean(o:object)", "rhs": "The {o.name} is clean."},
    {"rhs": "You see nothing special about the {o.name}."}]}""";
}

action inventory {
  template :: "inventory";
  feedback :: "#inventory.feedback#";
  grammar :: """{"inventory.feedback": [
    {"condition": "holdsany(a:agent)", "rhs": "You are carrying [{o.indefinite + ' ' + o.name | holds(a:agent, o:object)}]."},
    {"rhs": "You are not carrying anything."}]}""";
}

action look {
  template :: "look";
  feedback :: "#look.feedback#";
  grammar :: """{"look.feedback": [
    {"condition": "atlocation(a:agent, l:location) & receptacleatlocation(r:receptacle, l:location)",
     "rhs": "You are in front of the [{r.name | atlocation(a:agent, l:location) & receptacleatlocation(r:receptacle, l:location)}]."},
    {"rhs": "You are in the middle of a room. Looking around, you see [{r.indefinite + ' ' + r.name | receptacleatlocation(r:receptacle, l2:location)}]."}]}""";
}
'''
