# Makefile for delivery_outbox (PGXS)

MODULE_big = delivery_outbox
OBJS = delivery_outbox.o outbox_owner.o outbox_shmem.o outbox_databases.o outbox_xact.o outbox_marker_locks.o outbox_markers.o outbox_trigger.o outbox_order.o outbox_registry.o outbox_table.o outbox_partitions.o outbox_retention.o \
	outbox_statements.o outbox_execute.o outbox_heads.o outbox_rows.o outbox_insert.o outbox_args.o outbox_api.o outbox_enqueue.o outbox_monitor.o \
	outbox_worker.o
EXTENSION = delivery_outbox
DATA = $(notdir $(wildcard $(srcdir)/delivery_outbox--*.sql))
PGFILEDESC = "delivery_outbox - ack-tracked push-delivery outbox"

REGRESS = $(patsubst sql/%.sql,%,$(sort $(wildcard sql/*.sql)))
ISOLATION = $(patsubst specs/%.spec,%,$(sort $(wildcard specs/*.spec)))
TAP_TESTS = 1

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

$(OBJS): $(wildcard *.h)
