"""A native, pure-Python ALFWorld engine, differentially tested against textworld's ``PddlEnv``.

Modules: :mod:`pddl` (parsing), :mod:`names` (display names), :mod:`world` (static world and state),
:mod:`goal` (goal test), :mod:`rules` (commands, effects, texts), :mod:`env` (the environment),
:mod:`expert` (ALFWorld's handcoded expert on this engine).
"""

from evoharness.envs.alfworld.fast_engine.env import FastAlfworldEnv, load_world

__all__ = ["FastAlfworldEnv", "load_world"]
