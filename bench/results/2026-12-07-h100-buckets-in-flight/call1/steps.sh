step jobs 120 carry/gpu-suite --only jobs --budget 100 --out $R/suite-jobs
step fused 160 carry/gpu-suite --only hier-fused-2x2 --budget 60 --out $R/suite-fused
step fused2 200 carry/gpu-suite --only hier-fused-2x2 --budget 60 --out $R/suite-fused2
step hier 300 carry/gpu-suite --only hier-2x2 --budget 120 --out $R/suite-hier
step grad 370 carry/gpu-suite --only grad --budget 130 --out $R/suite-grad
