module github.com/vkc-project/vkc

go 1.26.8

require (
	github.com/emicklei/dot v1.6.2
	github.com/goki/vulkan v1.0.8
	github.com/google/go-cmp v0.7.0
	github.com/openai/openai-go/v3 v3.102.0
	github.com/prometheus/common v0.74.0
	github.com/rivo/uniseg v0.4.7
	github.com/x448/float16 v0.8.4
	golang.org/x/text v0.44.0
	gopkg.in/yaml.v3 v3.0.1
)

require (
	github.com/coder/websocket v1.8.15 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/pandatix/go-abnf v0.5.5 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/tidwall/gjson v1.20.0 // indirect
	github.com/tidwall/match v1.1.1 // indirect
	github.com/tidwall/pretty v1.2.1 // indirect
	github.com/tidwall/sjson v1.2.5 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
