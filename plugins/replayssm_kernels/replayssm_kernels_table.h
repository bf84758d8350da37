/* Layout of the tables the AOT build generates (replayssm_kernels_table.c). Internal. */
#ifndef REPLAYSSM_KERNELS_TABLE_H
#define REPLAYSSM_KERNELS_TABLE_H

enum { RS_T_PTR = 0, RS_T_I32 = 1, RS_T_I64 = 2, RS_T_F32 = 3 };

typedef struct {
  const char* name; /* the kernel's parameter name */
  int type;         /* RS_T_* */
  int div16;        /* the specialisation assumes the value (or address) divisible by 16 */
} rs_param_desc;

typedef struct {
  const char* key;       /* specialisation key (manifest.json) */
  int arch;              /* compute capability, e.g. 90 */
  const char* name;      /* symbol in the cubin */
  int num_warps;
  int shared;            /* bytes of dynamic shared memory */
  int block;             /* rows of the inner dim per program (BLOCK_P / BLOCK_V / BLOCK, times CHUNKS) */
  int heads_per_prog;    /* heads one program loops over */
  int row_block;         /* batch rows one program looks through (ROW_BLOCK; 1: a program a row) */
  int row_progs;         /* programs sharing the batch's flushing rows (ROW_PROGS; 0: a program a row block) */
  int programmatic;      /* launched as a programmatic dependent launch of the launch before it */
  int num_params;
  const rs_param_desc* params;
  const unsigned char* cubin;
  const unsigned char* cubin_end;
} rs_kernel_desc;

typedef struct {
  int arch;
  const char* key;       /* op|field=value|... (trtllm_replayssm.aot.specs.OpCase.key_string) */
  int batch;             /* the batch point whose tuned configs these launches use */
  int num_launches;
  const int* launches;   /* indices into rs_kernels, in launch order */
  const int* side_stream; /* per launch: 1 on the library's side stream (forked from the caller's stream
                             before the first such launch, joined back after the case's last launch) */
} rs_case_desc;

typedef struct {
  int arch;
  const char* tag;       /* the tuned tables the build took for this arch (ops/launch.py: table_tag) */
} rs_tables_desc;

extern const rs_kernel_desc rs_kernels[];
extern const int rs_num_kernels_built;
extern const rs_case_desc rs_cases[];
extern const int rs_num_cases;
extern const rs_tables_desc rs_tables[];
extern const int rs_num_tables;

#endif
