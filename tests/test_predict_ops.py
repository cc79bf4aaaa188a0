"""`roofline predict-ops`: round trip of a small CSV, one clear error per bad row."""

import pandas as pd
import pytest

from roofline.cli import main

HEADER = ("op,m,n,k,dtype,batch_size,seq_len,num_heads,num_kv_heads,head_dim,kv_dtype,message_bytes,num_devices,"
          "num_tokens,hidden_size,inter_size,topk,num_experts\n")
ROWS = [
    "gemm,128,4096,4096,bf16,,,,,,,,,,,,,",
    "gemm,128,4096,4096,fp8,,,,,,,,,,,,,",
    "attention_prefill,,,,bf16,4,1024,32,8,128,bf16,,,,,,,",
    "attention_decode,,,,bf16,64,2048,32,8,128,fp8,,,,,,,",
    "all_reduce,,,,bf16,,,,,,,1048576,8,,,,,",
    "moe,,,,bf16,,,,,,,,,256,4096,14336,2,8",
]


def run(tmp_path, rows, capsys=None):
    src, dst = tmp_path / "ops.csv", tmp_path / "pred.csv"
    src.write_text(HEADER + "\n".join(rows) + "\n")
    return main(["predict-ops", "--hardware", "h100-sxm", "--input", str(src), "--output", str(dst)]), dst


def test_round_trip(tmp_path):
    rc, dst = run(tmp_path, ROWS)
    assert rc == 0
    out = pd.read_csv(dst, dtype=str, keep_default_na=False)
    src = pd.read_csv(tmp_path / "ops.csv", dtype=str, keep_default_na=False)
    assert out.drop(columns="predicted_s").equals(src)
    predicted = out.predicted_s.astype(float)
    assert (predicted > 0).all() and (predicted < 1).all()


def test_bigger_gemm_takes_longer(tmp_path):
    rc, dst = run(tmp_path, ["gemm,1,4096,4096,bf16,,,,,,,,,,,,,", "gemm,8192,4096,4096,bf16,,,,,,,,,,,,,"])
    small, big = pd.read_csv(dst).predicted_s
    assert rc == 0 and big > 10 * small


@pytest.mark.parametrize("row,message", [
    ("conv,1,1,1,bf16,,,,,,,,,,,,,", "row 2, column 'op': 'conv' is not allowed"),
    ("gemm,1,1,x,bf16,,,,,,,,,,,,,", "row 2, column 'k'"),
    ("gemm,1,1,1,fp64,,,,,,,,,,,,,", "row 2, column 'dtype'"),
    ("gemm,-4,1,1,bf16,,,,,,,,,,,,,", "row 2, column 'm'"),
    ("attention_decode,,,,bf16,1,8,32,6,128,bf16,,,,,,,", "row 2, column 'num_kv_heads'"),
    ("moe,,,,bf16,,,,,,,,,16,64,64,9,8", "row 2, column 'topk'"),
    ("all_reduce,,,,bf16,,,,,,,1048576,1,,,,,", "row 2, column 'num_devices': must be >= 2"),
])
def test_bad_rows_name_row_and_column(tmp_path, capsys, row, message):
    rc, _ = run(tmp_path, [row])
    assert rc == 2
    assert message in capsys.readouterr().err


def test_missing_column(tmp_path, capsys):
    src = tmp_path / "ops.csv"
    src.write_text("op,m,n,dtype\ngemm,1,2,bf16\n")
    rc = main(["predict-ops", "--hardware", "h100-sxm", "--input", str(src), "--output", str(tmp_path / "o.csv")])
    assert rc == 2 and "missing column 'k'" in capsys.readouterr().err


def test_moe_gated_column_is_optional_and_checked(tmp_path, capsys):
    # `gated` (true / false) is optional: absent, experts are gated (SwiGLU); false, one up projection (Nemotron-H).
    src, dst = tmp_path / "ops.csv", tmp_path / "pred.csv"
    shape = "moe,32,2048,5120,22,512,fp8"
    src.write_text(f"op,num_tokens,hidden_size,inter_size,topk,num_experts,dtype,gated\n{shape},true\n{shape},FALSE\n")
    assert main(["predict-ops", "--hardware", "b200", "--input", str(src), "--output", str(dst)]) == 0
    gated, ungated = pd.read_csv(dst).predicted_s
    assert ungated < 0.8 * gated
    rc, absent = run(tmp_path, ["moe,,,,bf16,,,,,,,,,256,4096,14336,2,8"])
    src.write_text("op,num_tokens,hidden_size,inter_size,topk,num_experts,dtype,gated\nmoe,256,4096,14336,2,8,bf16,true\n")
    assert main(["predict-ops", "--hardware", "h100-sxm", "--input", str(src), "--output", str(dst)]) == 0
    assert rc == 0 and pd.read_csv(absent).predicted_s[0] == pd.read_csv(dst).predicted_s[0]
    src.write_text(f"op,num_tokens,hidden_size,inter_size,topk,num_experts,dtype,gated\n{shape},maybe\n")
    assert main(["predict-ops", "--hardware", "b200", "--input", str(src), "--output", str(dst)]) == 2
    assert "row 2, column 'gated': 'maybe' is not allowed for op 'moe'; allowed: true, false" in capsys.readouterr().err
