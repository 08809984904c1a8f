module deja.example/exec

go 1.19
