# bench/peers/report.awk -- bench/peers.sh's table, from raw/results:
#   a|SYS|ROUND|TPS                          producers alone
#   b|SYS|ROUND|TPS|DONE/S|P50|P99|N[|NOTE]  with consumers
#   c|SYS|ROUND|TPS|DONE/S|P50|P99|N         paced
# Every figure is the median over the rounds; each ratio is taken within a
# round, then the median over the rounds (lowest and highest in brackets).
# Variables: systems (the order), checks ("SYS=enq|done|again|left ..."),
# notes ("SYS=text;..."), rate.

function median(list,    n, a, i, j, t) {
    n = split(list, a, " ")
    if (n == 0) return ""
    for (i = 2; i <= n; i++) {
        t = a[i]; j = i - 1
        while (j > 0 && a[j] + 0 > t + 0) { a[j + 1] = a[j]; j-- }
        a[j + 1] = t
    }
    lo = a[1]; hi = a[n]
    return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function add(key, v) { if (v != "") vals[key] = vals[key] " " v }
function fmt(v, d) { return v == "" ? "-" : sprintf("%." d "f", v) }

{
    ph = $1; sys = $2; r = $3
    rounds[r] = 1
    if (ph == "a") { add(sys SUBSEP "a", $4); a[sys, r] = $4; next }
    add(sys SUBSEP ph "tps", $4)
    add(sys SUBSEP ph "dps", $5)
    add(sys SUBSEP ph "p50", $6)
    add(sys SUBSEP ph "p99", $7)
    if (ph == "c") reached[sys] = reached[sys] " " $4
    if (ph == "b") dps[sys, r] = $5
    if ($9 != "") note[sys] = $9
    seen[sys] = 1
}

END {
    n = split(systems, order, " ")
    split(notes, nl, ";")
    for (i in nl) if (nl[i] != "") {
        k = index(nl[i], "="); note[substr(nl[i], 1, k - 1)] = substr(nl[i], k + 1)
    }
    m = split(checks, cl, " ")
    for (i = 1; i <= m; i++) {
        k = index(cl[i], "="); check[substr(cl[i], 1, k - 1)] = substr(cl[i], k + 1)
    }

    print "| system | producers alone (tx/s) | with consumers: producers (tx/s) | done/s | p50 / p99 ms | at " rate " tx/s: p50 / p99 ms |"
    print "|---|---:|---:|---:|---:|---:|"
    for (i = 1; i <= n; i++) {
        s = order[i]
        if (!(s in seen)) {
            if (s in note) print "| " s " | " note[s] " | | | | |"
            continue
        }
        as = (s ~ /^outbox/ && s != "outbox_split" && s != "outbox_del") ? "outbox" : s
        # a paced run whose producers fell short of the rate says so
        ctps = median(reached[s])
        short = (ctps != "" && ctps < 0.95 * rate) ? sprintf(" (producers reached only %.0f tx/s)", ctps) : ""
        printf "| %s | %s | %s | %s | %s / %s | %s / %s%s |\n", s,
            fmt(median(vals[as, "a"]), 0), fmt(median(vals[s, "btps"]), 0),
            fmt(median(vals[s, "bdps"]), 0),
            fmt(median(vals[s, "bp50"]), 1), fmt(median(vals[s, "bp99"]), 1),
            fmt(median(vals[s, "cp50"]), 1), fmt(median(vals[s, "cp99"]), 1), short
    }
    if ("outbox_ackclaim" in seen || "outbox_ackclaim_async" in seen)
        print "(the outbox variants share the outbox database: their \"producers alone\" is outbox's)"

    print ""
    print "done/s ratios, within each round (median over the rounds, [lowest, highest]):"
    for (i = 1; i <= n; i++) {
        o = order[i]
        if (o !~ /^outbox/ || !(o in seen)) continue
        for (j = 1; j <= n; j++) {
            p = order[j]
            if (p ~ /^outbox/ || !(p in seen)) continue
            list = ""
            for (r in rounds)
                if (((o, r) in dps) && ((p, r) in dps) && dps[p, r] > 0)
                    list = list " " dps[o, r] / dps[p, r]
            if (list == "") continue
            med = median(list)
            printf "    %s / %s: %.2f [%.2f, %.2f]\n", o, p, med, lo, hi
        }
    }

    print ""
    print "every job completed? (over the whole run, after the last drain)"
    print "| database | jobs enqueued | completed | delivered more than once | not completed |"
    print "|---|---:|---:|---:|---:|"
    for (i = 1; i <= n; i++) {
        s = order[i]
        if (!(s in check)) continue
        split(check[s], c, "|")
        printf "| %s | %s | %s | %s | %s |\n", s, c[1], c[2], c[3], c[4]
    }
    for (s in note) if (s in seen) print "note: " s ": " note[s]
}
