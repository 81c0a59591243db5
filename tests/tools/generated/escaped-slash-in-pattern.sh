# expect: exact
MODEL=Qwen/Qwen2.5-7B
python3 -m verl.trainer.main_ppo trainer.experiment_name=${MODEL//\//_} k="${MODEL/\//-}" j=${MODEL#*\/}
