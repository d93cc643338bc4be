"""Sudoku: fill a 9x9 grid one placement at a time (RAGEN's SimpleSudoku / MediumSudoku)."""

from envs.sudoku.actions import Placement, parse_action
from envs.sudoku.board import count_solutions, is_solved
from envs.sudoku.env import INSTRUCTION, SudokuEnv
from envs.sudoku.generator import cells_to_remove, generate_puzzle

__all__ = ["INSTRUCTION", "Placement", "SudokuEnv", "cells_to_remove", "count_solutions",
           "generate_puzzle", "is_solved", "parse_action"]
