module netload

go 1.22
