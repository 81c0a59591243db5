# expect: exact
rec "${D:-~}" ${D:-~} ${D:-~/x} "${D:-~/x}"
A=${D:-~}
B="${D:-~}"
rec "$A" "$B"
