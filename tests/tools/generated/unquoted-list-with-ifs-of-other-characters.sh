# args: '~-~@}*a/' ':b[!/:^'
# expect: exact
IFS=' :'
python3 -m verl.trainer.main_ppo trainer.experiment_name=x09$*
