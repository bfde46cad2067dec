/*-------------------------------------------------------------------------
 *
 * outbox_args.h
 *		Argument checks and result helpers of the SQL-callable functions.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_args.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_ARGS_H
#define OUTBOX_ARGS_H

#include "fmgr.h"
#include "nodes/parsenodes.h"
#include "utils/tuplestore.h"

#include "outbox_table.h"

/*
 * Whether argument n is NULL or absent: the C functions also serve the SQL
 * declarations of older versions, which have fewer arguments, until ALTER
 * EXTENSION UPDATE.
 */
#define OUTBOX_ARG_IS_NULL(n)	(PG_NARGS() <= (n) || PG_ARGISNULL(n))

extern OutboxTable *outbox_target(FunctionCallInfo fcinfo, int argno,
								  AclMode mode);
extern OutboxTable *outbox_target_columns(FunctionCallInfo fcinfo, int argno,
										  AclMode mode,
										  const char *const *columns);
extern void outbox_check_text(FunctionCallInfo fcinfo, int argno,
							  const char *name, bool required);
extern Datum outbox_null_text(FunctionCallInfo fcinfo, int argno, char *null);
extern Datum outbox_text_array(FunctionCallInfo fcinfo, int argno,
							   const char *name, bool required,
							   bool elements_required, int *nitems);
extern int64 outbox_check_max_rows(FunctionCallInfo fcinfo, int argno);
extern Datum outbox_check_ids(FunctionCallInfo fcinfo, int argno);
extern void outbox_check_interval(FunctionCallInfo fcinfo, int argno,
								  const char *name);
extern Datum outbox_cutoff(FunctionCallInfo fcinfo, int argno);
extern Datum outbox_count_result(uint64 count);
extern Tuplestorestate *outbox_begin_srf(FunctionCallInfo fcinfo, bits32 flags);
extern void outbox_put_rows(Tuplestorestate *tupstore, TupleDesc tupdesc);

#endif							/* OUTBOX_ARGS_H */
