"""PEFT and diffusers (pinned in requirements.txt) run unmodified on tpu and
match the CPU: a LoRA fine-tune of a tiny Llama (losses per step, adapter
weights, merge), and a DDPM pipeline on a tiny UNet (the image)."""
import pytest
import torch

import torch_tpu  # noqa: F401


def _tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=64)
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg)


@pytest.mark.parametrize("use_dora", [False, True])
def test_peft_lora_fine_tune_matches_cpu(use_dora):
    import peft

    assert peft.__version__ == "0.21.0"
    base = _tiny_llama()
    torch.manual_seed(1)
    ids = torch.randint(0, 128, (2, 16))
    results = {}
    for device in ("cpu", "tpu"):
        model = _tiny_llama()
        model.load_state_dict(base.state_dict())
        cfg = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                              use_dora=use_dora, init_lora_weights="gaussian")
        torch.manual_seed(2)
        model = peft.get_peft_model(model, cfg).to(device)
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
        losses = []
        for _ in range(3):
            out = model(input_ids=ids.to(device), labels=ids.to(device))
            out.loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(out.loss.item())
        lora = {k: v.detach().cpu() for k, v in model.state_dict().items() if "lora_" in k}
        merged = model.merge_and_unload()
        logits = merged(input_ids=ids.to(device)).logits.detach().cpu()
        results[device] = (losses, lora, logits)
    (lc, ac, gc), (lt, at, gt) = results["cpu"], results["tpu"]
    torch.testing.assert_close(torch.tensor(lt), torch.tensor(lc), rtol=1e-4, atol=1e-5)
    assert ac.keys() == at.keys() and len(ac) > 0
    for k in ac:
        torch.testing.assert_close(at[k], ac[k], rtol=1e-3, atol=1e-5)
    assert lc[-1] < lc[0]  # it trained
    torch.testing.assert_close(gt, gc, rtol=1e-3, atol=1e-4)


def test_diffusers_ddpm_pipeline_matches_cpu():
    import diffusers
    from diffusers import DDPMPipeline, DDPMScheduler, UNet2DModel

    assert diffusers.__version__ == "0.42.0"
    torch.manual_seed(0)
    unet = UNet2DModel(sample_size=16, in_channels=3, out_channels=3, layers_per_block=1,
                       block_out_channels=(16, 32), norm_num_groups=8,
                       down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                       up_block_types=("AttnUpBlock2D", "UpBlock2D"))
    images = {}
    for device in ("cpu", "tpu"):
        pipe = DDPMPipeline(unet=unet, scheduler=DDPMScheduler(num_train_timesteps=50)).to(device)
        pipe.set_progress_bar_config(disable=True)
        out = pipe(batch_size=2, num_inference_steps=5, output_type="np",
                   generator=torch.Generator("cpu").manual_seed(3))
        images[device] = torch.from_numpy(out.images)
    assert images["tpu"].shape == (2, 16, 16, 3)
    torch.testing.assert_close(images["tpu"], images["cpu"], rtol=1e-3, atol=1e-3)
