# expect: refused
case x in - \ ) rec one ;; *) rec other ;; esac
