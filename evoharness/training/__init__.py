"""Student training: the tiny local student builder and supervised fine-tuning with TRL."""
