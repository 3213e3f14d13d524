module github.com/vkc-project/vkc

go 1.26.8

require (
	github.com/emicklei/dot v1.6.2
	github.com/goki/vulkan v1.0.8
	github.com/google/go-cmp v0.7.0
	github.com/x448/float16 v0.8.4
	golang.org/x/text v0.44.0
	gopkg.in/yaml.v3 v3.0.1
)
