"""MetaMathQA: answer math word problems (RAGEN's MetamathQA env), with offline problems."""

from envs.metamathqa.answers import answers_match, extract_label, parse_number
from envs.metamathqa.env import INSTRUCTION, MetaMathQAEnv, load_problems
from envs.metamathqa.generator import TEMPLATES, generate_problem

__all__ = ["INSTRUCTION", "MetaMathQAEnv", "TEMPLATES", "answers_match", "extract_label",
           "generate_problem", "load_problems", "parse_number"]
