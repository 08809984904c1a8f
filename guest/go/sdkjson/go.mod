module deja.example/sdkjson

go 1.19
