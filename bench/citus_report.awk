# bench/citus_report.awk -- bench/citus.sh's table, from its results:
#   plain|round|tps|rows|cpu_ms
#   level1|round|tps|rows|cpu_coordinator|cpu_worker1|cpu_worker2
#   level2|round|tps|rows|cpu_coordinator|cpu_worker1|cpu_worker2|rows_worker1|rows_worker2
# Medians over the rounds; the ratios taken within a round (the setups of
# a round ran minutes apart, each round's windows seconds apart).

function median(list,    a, n, i, j, t) {
    n = split(list, a, " ")
    if (n == 0) return ""
    for (i = 1; i <= n; i++)
        for (j = i + 1; j <= n; j++)
            if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    lo = a[1]; hi = a[n]
    return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function add(key, v) { vals[key] = vals[key] " " v }
function ms(cpu, rows) { return rows > 0 ? cpu / rows : 0 }

{
    s = $1; r = $2; rounds[r] = 1; seen[s] = 1
    add(s SUBSEP "tps", $3)
    add(s SUBSEP "dps", $4)
    if (s == "plain") {
        add(s SUBSEP "node", ms($5, $4)); add(s SUBSEP "total", ms($5, $4))
    } else {
        add(s SUBSEP "coord", ms($5, $4)); add(s SUBSEP "w1", ms($6, $4))
        add(s SUBSEP "w2", ms($7, $4)); add(s SUBSEP "total", ms($5 + $6 + $7, $4))
        coord[s, r] = ms($5, $4)
    }
    if (s == "level2" && $8 + $9 > 0) {
        add("share1", $8 / (($8 + $9) / 2)); add("share2", $9 / (($8 + $9) / 2))
    }
}

END {
    print "CPU time per delivered row (ms), by node; rows delivered in the producers' window"
    print "| setup | producers (tx/s) | rows delivered | plain node | coordinator | worker1 | worker2 | all nodes |"
    print "|---|---:|---:|---:|---:|---:|---:|---:|"
    n = split("plain level1 level2", order, " ")
    for (i = 1; i <= n; i++) {
        s = order[i]
        if (!(s in seen)) continue
        if (s == "plain")
            printf "| %s | %.0f | %.0f | %.3f | | | | %.3f |\n", s, median(vals[s, "tps"]),
                median(vals[s, "dps"]), median(vals[s, "node"]), median(vals[s, "total"])
        else
            printf "| %s | %.0f | %.0f | | %.3f | %.3f | %.3f | %.3f |\n", s, median(vals[s, "tps"]),
                median(vals[s, "dps"]), median(vals[s, "coord"]), median(vals[s, "w1"]),
                median(vals[s, "w2"]), median(vals[s, "total"])
    }
    print ""
    list = ""
    for (r in rounds)
        if (((("level1", r) in coord)) && (("level2", r) in coord) && coord["level1", r] > 0)
            list = list " " coord["level2", r] / coord["level1", r]
    if (list != "") {
        m = median(list)
        printf "coordinator CPU per row, level2 / level1: %.2f [%.2f, %.2f] (goal <= 0.3)\n", m, lo, hi
    }
    if (vals["share1"] != "") {
        m1 = median(vals["share1"]); l1 = lo; h1 = hi
        m2 = median(vals["share2"]); l2 = lo; h2 = hi
        printf "level2 rows per worker against an even split: worker1 %.2f [%.2f, %.2f], worker2 %.2f [%.2f, %.2f] (goal within 0.80-1.20)\n",
            m1, l1, h1, m2, l2, h2
    }
}
