case $PWD in
  */children/lib) export N=1 ;;
esac
bash ./uses_n.bash
