"""sglforge TEST DOUBLE: a STAND-IN for aiter's fused-MoE tuner (no real tuning runs).

Installed in a test image at ``<aiter>/csrc/ck_gemm_moe_2stages_codegen/gemm_moe_tune.py``
(tests/docker/test_tune.py), where ``sglforge configs tune`` runs aiter's tuner. It takes the
real tuner's ``-i UNTUNED -o TUNED`` and lists ``--compare`` and ``--update_improved`` in its
``--help`` (aiter/utility/base_tuner.py has them), reads the untuned CSV and writes one row per
key in the columns of the replica's aiter tuned_fmoe.csv, with kernel names that say they are
a stand-in's and made-up times. Nothing it writes is a measurement: it proves only the plumbing
(input written from the coverage's misses, tuner run in the image, rows turned into an item).
"""

import argparse
import csv
import sys

COLUMNS = (
    "cu_num,token,model_dim,inter_dim,expert,topk,act_type,dtype,q_dtype_a,q_dtype_w,q_type,"
    "use_g1u1,doweight_stage1,block_m,ksplit,us1,kernelName1,err1,us2,kernelName2,err2,us,"
    "run_1stage,tflops,bw"
).split(",")


def main() -> int:
    p = argparse.ArgumentParser(description="STAND-IN for aiter's gemm_moe_tune.py")
    p.add_argument("-i", "--untune_file", required=True)
    p.add_argument("-o", "--tune_file", required=True)
    p.add_argument("--compare", action="store_true")
    p.add_argument("--update_improved", action="store_true")
    p.add_argument("--errRatio", type=float, default=0.5)
    args = p.parse_args()
    with open(args.untune_file, newline="") as fh:
        rows = list(csv.DictReader(fh))
    with open(args.tune_file, "w", newline="") as fh:
        w = csv.DictWriter(fh, COLUMNS, lineterminator="\n")
        w.writeheader()
        for n, r in enumerate(rows):
            out = {c: r.get(c, "") for c in COLUMNS}
            out.update(
                cu_num="256",
                block_m="32",
                ksplit="0",
                us1="1.0",
                kernelName1="STANDIN_tuner_stage1",
                err1="0.0%",
                us2="1.0",
                kernelName2="STANDIN_tuner_stage2",
                err2="0.0%",
                us=f"{2.0 + n / 100:.2f}",
                run_1stage="0",
                tflops="0",
                bw="0",
            )
            w.writerow(out)
    print(f"STAND-IN tuner: {len(rows)} key(s) -> {args.tune_file}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
