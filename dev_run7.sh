python3 -m pip install --no-build-isolation --no-deps -q . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
timeout 400 python3 benchmarks/train_throughput.py --images 1024 --workers 14 --train-workers 14 --precisions fp32,tf32,fp16,bf16 --iterations 20 --loader-batches 40 --loader-warmup 60 --write $OUT/tt.md > $OUT/tt.txt 2>&1; cat $OUT/tt.md
cd src-test && timeout 150 python3 -m pytest -q -p no:cacheprovider test_train_queued_step.py test_half_training.py test_upload_ahead.py -k "cuda or demo or loop" > $OUT/tests4.log 2>&1; tail -4 $OUT/tests4.log
