"""Student training on TRL: from a curated dataset to stored, versioned students.

- Students: ``tiny_student`` builds Qwen3-architecture students locally (tokenizer trained on the data, the
  official Qwen3 chat template), so local and hub bases take one code path; ``student_card`` records how a
  student was trained and which prompt set it plays with.
- Recipes: ``recipes`` reads the versioned recipe files (``configs/recipes/*.yaml``) that name every stage's
  settings; each stage's settings model (``sft_config``, ``grpo_config``, ...) is the one declaration of its fields.
- SFT: ``sft`` (TRL's ``SFTTrainer`` on prompt-completion turns), ``react_view`` (the ReAct baseline's data) and
  ``decisions`` (held-out decision metrics).
- GRPO: ``grpo`` (entry points), ``grpo_trainer``, ``grpo_samples`` (advantages, one sample per turn),
  ``rollout`` (multi-turn episodes in the environment through the harness), ``reward`` (the cost-aware reward,
  one function per term), ``curriculum`` (the train games a policy lost), ``vllm_generation`` and
  ``fixed_rollouts`` (replayed episodes for exact comparisons).
- DAgger: ``relabel`` (the student plays, the expert labels the states it reaches).
- Model versions: ``model_versions`` (content-addressed ids, lineage), ``realize`` (plan, train, store: the one
  path for every runner) and ``job_runner`` (the one child entry point).
- Around TRL: ``trainer_utils``, ``trl_contract`` (every TRL internal relied on, checked) and ``hardware``.
"""
