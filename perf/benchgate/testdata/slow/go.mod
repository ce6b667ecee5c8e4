module slowbench

go 1.26
