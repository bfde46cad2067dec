# bench/report.awk -- the table and the target lines of bench/run.sh
#
# Input: run.sh's raw results, one run per line, fields separated by "|":
#   E|workload|clients|sync|rep|tx/s|rows/s|listener|rows|notified|check|senders|note
#   C|C1-mode-table|clients|sync|rep|claims/s|rows/s|no|rows|rows per claim|||note
#   L|L1-mode|clients|sync|rep|tx/s|p50 ms|relay|rows|p99 ms|max ms|relay stats|note
# Variables: cells, want, deferred_note, batch_note, pgq_note, l1rate, l1c,
# acked (the big C1 table's acked rows, e.g. "2M").
# Every figure is the median of its runs.  Every ratio is paired: the ratio
# of the two workloads within each round of the same cell (they ran a few
# seconds apart), then the median over the rounds; with more than one round
# the notes give the lowest and highest round.  Plain POSIX awk (mawk).

function median(key,    n, i, j, v, t, a) {
    n = cnt[key]
    if (n == 0)
        return ""
    for (i = 1; i <= n; i++)
        a[i] = vals[key, i] + 0
    for (i = 2; i <= n; i++) {
        t = a[i]
        for (j = i - 1; j >= 1 && a[j] > t; j--)
            a[j + 1] = a[j]
        a[j + 1] = t
    }
    if (n % 2)
        return a[(n + 1) / 2]
    return (a[n / 2] + a[n / 2 + 1]) / 2
}

function add(key, v) {
    if (v == "")
        return
    cnt[key]++
    vals[key, cnt[key]] = v
}

function ratio(a, b) {
    if (a == "" || b == "" || b + 0 == 0)
        return ""
    return a / b
}

# pratio(A, B, c, s, field): median over rounds of A's field / B's field in
# the same round; sets PR_MIN, PR_MAX and PR_N.
function pratio(a, b, c, s, f,    r, k, key, n) {
    key = "pr" SUBSEP a SUBSEP b SUBSEP c SUBSEP s SUBSEP f
    delete cnt[key]
    PR_MIN = ""; PR_MAX = ""; PR_N = 0
    for (r = 1; r <= maxrep; r++) {
        if (!((a, c, s, r, f) in one) || !((b, c, s, r, f) in one))
            continue
        if (one[b, c, s, r, f] + 0 == 0)
            continue
        k = one[a, c, s, r, f] / one[b, c, s, r, f]
        add(key, k)
        if (PR_MIN == "" || k < PR_MIN) PR_MIN = k
        if (PR_MAX == "" || k > PR_MAX) PR_MAX = k
        PR_N++
    }
    return median(key)
}

function spread() {
    return (PR_N > 1) ? sprintf(" (rounds %.2f-%.2f)", PR_MIN, PR_MAX) : ""
}

function fmt(v, f) {
    return (v == "") ? "-" : sprintf(f, v)
}

function line(label, c, s, lis, tx, rows, r, notes) {
    printf "%-36s %7s %4s %-8s %10s %10s %6s  %s\n", label, c, s, lis, tx, rows, r, notes
}

function target(ok, text) {
    if (ok == "")
        printf "N/A   %s\n", text
    else
        printf "%s  %s\n", ok ? "PASS" : "FAIL", text
    ntarget++
}

BEGIN {
    FS = "|"
    label["E1"] = "E1 raw INSERT (reference)"
    label["E2"] = "E2 PL/pgSQL pg_notify trigger"
    label["E3"] = "E3 outbox_enqueue, notify=commit"
    label["E4"] = "E4 outbox_enqueue, notify=deferred"
    label["E5"] = "E5 outbox_enqueue_batch x100"
    label["E6"] = "E6 PgQ pgq.insert_event"
    label["C1-all-big"] = "C1 claim10+ack whole, " acked " acked"
    label["C1-all-empty"] = "C1 claim10+ack whole, no acked"
    label["C1-recipient-big"] = "C1 claim10+ack per recip, " acked " acked"
    label["C1-recipient-empty"] = "C1 claim10+ack per recip, no acked"
    missing["E4"] = deferred_note
    missing["E5"] = batch_note
    missing["E6"] = pgq_note
}

{
    kind = $1; w = $2; c = $3; s = $4
    key = w SUBSEP c SUBSEP s
    seen[key] = 1
    add(key SUBSEP "tx", $6)
    add(key SUBSEP "rows", $7)
    if ($5 + 0 > maxrep)
        maxrep = $5 + 0
    if ($6 != "")
        one[w, c, s, $5, "tx"] = $6
    if ($7 != "")
        one[w, c, s, $5, "rows"] = $7
    lis[key] = $8
    if (kind == "E") {
        runs[key]++
        if ($11 == "ok")
            okruns[key]++
        else if ($11 == "bad")
            badtxt[key] = badtxt[key] sprintf(" rep%s:%s/%s", $5, $10, $9)
        if ($12 != "" && $12 != "-")
            senders[key] = $12
    } else if (kind == "C") {
        add(key SUBSEP "per", $10)
    } else if (kind == "L") {
        add(key SUBSEP "p99", $10)
        add(key SUBSEP "max", $11)
        add(key SUBSEP "n", $9)
        relay[key] = $12
    }
    if ($13 != "")
        notes[key] = notes[key] " [rep" $5 ": " $13 "]"
}

END {
    nc = split(cells, cl, " ")
    nw = split("E1 E2 E3 E4 E5 E6", ew, " ")
    nm = split("C1-all-big C1-all-empty C1-recipient-big C1-recipient-empty", cw, " ")

    line("workload", "clients", "sync", "listener", "tx/s", "rows/s", "ratio", "notes")
    line("--------", "-------", "----", "--------", "----", "------", "-----", "-----")
    for (i = 1; i <= nc; i++) {
        split(cl[i], cs, ":")
        c = cs[1]; s = cs[2]
        ref = median("E1" SUBSEP c SUBSEP s SUBSEP "rows")
        for (j = 1; j <= nw; j++) {
            w = ew[j]
            if (index(" " want " ", " " w " ") == 0)
                continue
            key = w SUBSEP c SUBSEP s
            if (!(key in seen)) {
                if (missing[w] != "")
                    line(label[w], c, s, "-", "-", "-", "-", missing[w])
                continue
            }
            tx = median(key SUBSEP "tx")
            rows = median(key SUBSEP "rows")
            r = pratio(w, "E1", c, s, "rows")
            sp = (w == "E1") ? "" : spread()
            med[w, c, s] = rows
            rat[w, c, s] = r
            note = ""
            if (w == "E1" || w == "E6")
                note = ""
            else if (runs[key] > 0 && okruns[key] == runs[key]) {
                note = sprintf("every id notified (%d/%d runs)", okruns[key], runs[key])
                allids[w, c, s] = 1
            } else if (badtxt[key] != "")
                note = sprintf("ids MISSING or wrong (got/rows):%s", badtxt[key])
            else if (runs[key] > 0)
                note = "ids not checked"
            if ((w == "E3" || w == "E4") && senders[key] != "")
                note = note sprintf(", sent by %s backend(s)", senders[key])
            note = note sp notes[key]
            sub(/^ +/, "", note)
            line(label[w], c, s, lis[key], fmt(tx, "%.0f"), fmt(rows, "%.0f"),
                 fmt(r, "%.2f"), note)
        }
        if (index(" " want " ", " C1 ") == 0)
            continue
        for (j = 1; j <= nm; j++) {
            w = cw[j]
            key = w SUBSEP c SUBSEP s
            if (!(key in seen))
                continue
            tx = median(key SUBSEP "tx")
            rows = median(key SUBSEP "rows")
            other = w
            sub(/-big$/, "-empty", other)
            r = pratio(w, other, c, s, "tx")
            sp = (w ~ /-big$/) ? spread() : ""
            if (w ~ /-big$/)
                crat[w, c, s] = r
            line(label[w], c, s, "no", fmt(tx, "%.0f"), fmt(rows, "%.0f"), fmt(r, "%.2f"),
                 sprintf("claims/s; %s rows/claim%s", fmt(median(key SUBSEP "per"), "%.1f"),
                         (w ~ /-big$/) ? "; ratio = big/empty" sp : "") notes[key])
        }
    }

    if (index(" " want " ", " L1 ") > 0) {
        print ""
        printf "%-36s %7s %4s %-8s %10s %10s %10s %10s  %s\n", "latency (enqueue commit to ack)", "clients", "sync", "listener", "tx/s", "p50 ms", "p99 ms", "max ms", "notes"
        n = split("commit deferred", lm, " ")
        for (j = 1; j <= n; j++) {
            w = "L1-" lm[j]
            key = w SUBSEP l1c SUBSEP "on"
            if (!(key in seen)) {
                if (lm[j] == "deferred")
                    printf "%-36s %7s %4s %-8s %10s %10s %10s %10s  %s\n", "L1 notify=deferred, " l1rate " rows/s", l1c, "on", "-", "-", "-", "-", "-", deferred_note
                continue
            }
            p99 = median(key SUBSEP "p99")
            l1p99[lm[j]] = p99
            printf "%-36s %7s %4s %-8s %10s %10s %10s %10s  %s\n",
                   "L1 notify=" lm[j] ", " l1rate " rows/s", l1c, "on", "relay",
                   fmt(median(key SUBSEP "tx"), "%.0f"), fmt(median(key SUBSEP "rows"), "%.2f"),
                   fmt(p99, "%.2f"), fmt(median(key SUBSEP "max"), "%.2f"),
                   sprintf("%s rows/run; %s", fmt(median(key SUBSEP "n"), "%.0f"), relay[key]) notes[key]
        }
    }

    print ""
    print "targets (see bench/README.md; ratios from this run):"
    # E4/E1 >= 0.90 at 16 clients, synchronous_commit on, every id received
    r = rat["E4", 16, "on"]
    if (r == "")
        target("", "E4/E1 >= 0.90 at 16 clients, sync on, listener receiving every id: not measured")
    else
        target(r >= 0.90 && allids["E4", 16, "on"],
               sprintf("E4/E1 >= 0.90 at 16 clients, sync on, listener receiving every id: %.2f%s",
                       r, allids["E4", 16, "on"] ? "" : " (ids missing)"))
    # E3/E2 >= 1.0 in every cell
    txt = ""; ok = 1; any = 0
    for (i = 1; i <= nc; i++) {
        split(cl[i], cs, ":")
        r = pratio("E3", "E2", cs[1], cs[2], "rows")
        if (r == "")
            continue
        any = 1
        txt = txt sprintf(" %s/%s %.2f", cs[1], cs[2], r)
        if (r < 1.0)
            ok = 0
    }
    target(any ? ok : "", "E3/E2 >= 1.0 in every cell:" (any ? txt : " not measured"))
    # E5 rows/s >= 3x E3 rows/s at 4 clients
    txt = ""; ok = 1; any = 0
    for (i = 1; i <= nc; i++) {
        split(cl[i], cs, ":")
        if (cs[1] != 4)
            continue
        r = pratio("E5", "E3", cs[1], cs[2], "rows")
        if (r == "")
            continue
        any = 1
        txt = txt sprintf(" 4/%s %.1fx", cs[2], r)
        if (r < 3.0)
            ok = 0
    }
    target(any ? ok : "", "E5 rows/s >= 3x E3 rows/s at 4 clients:" (any ? txt : " not measured (no 4-client cell, or no E5)"))
    # C1 big/empty >= 0.8, whole table and per recipient
    for (m = 1; m <= 2; m++) {
        w = (m == 1) ? "C1-all-big" : "C1-recipient-big"
        txt = ""; ok = 1; any = 0
        for (i = 1; i <= nc; i++) {
            split(cl[i], cs, ":")
            r = crat[w, cs[1], cs[2]]
            if (r == "")
                continue
            any = 1
            txt = txt sprintf(" %s/%s %.2f", cs[1], cs[2], r)
            if (r < 0.8)
                ok = 0
        }
        target(any ? ok : "", sprintf("C1 %s claims, %s acked / none >= 0.8:%s",
               (m == 1) ? "whole-table" : "per-recipient", acked, any ? txt : " not measured"))
    }
    # L1 p99 <= 10 ms in both modes
    for (j = 1; j <= 2; j++) {
        mname = (j == 1) ? "commit" : "deferred"
        p = l1p99[mname]
        if (p == "")
            target("", sprintf("L1 p99 <= 10 ms at %s rows/s, notify=%s: not measured", l1rate, mname))
        else
            target(p <= 10, sprintf("L1 p99 <= 10 ms at %s rows/s, notify=%s: %.2f ms", l1rate, mname, p))
    }
}
