# bench/startup.gp - time to first answer against state size, log-log, one
# line per system.  Data: ah-bench's startup.dat (one block per system, in
# the order of `names`; columns updates, median, min, max).
#   gnuplot -e "datafile='build/bench/startup.dat'; outfile='build/bench/startup.png'" bench/startup.gp
if (!exists("datafile")) datafile = 'build/bench/startup.dat'
if (!exists("outfile")) outfile = 'build/bench/startup.png'
names = "arrheap-warm arrheap-cold rebuild rocksdb-warm rocksdb-cold lmdb-kv-warm lmdb-kv-cold"
set terminal png size 960,640 font ",11"
set output outfile
set logscale xy
set offsets graph 0.06, graph 0.06, 0, 0  # points off the frame
set format x "10^{%L}"
set format y "10^{%L}"
set xlabel "state size (updates)"
set ylabel "process start to first answer (ms, median; bars: min-max)"
set title "arrheap: time to first answer after a restart"
set key outside right top
set grid
plot for [i=1:words(names)] datafile index (i-1) using 1:2:3:4 \
     with yerrorlines lw 2 title word(names, i)
